// The time sweep of the goodput report (launch/report/goodput.h). Every event of the ledger becomes
// an interval on one time line; where intervals overlap, the more specific one owns the time
// (checkpoint load > checkpoint save > evaluation > step > other span > startup > "inside an
// attempt" > idle). One sweep over the sorted interval ends then hands each elementary segment of
// wall time to exactly one owner, so the categories sum to the wall time by construction.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "launch/report/goodput.h"
#include "launch/report/ledger.h"

namespace tetra::launch {

// The job-level shares of the wall time [wall_start, wall_end] (Unix seconds). Steps' shares go to
// their StepExec::covered, split later into productive time and step-level badput.
struct WallShares {
  // Filled: startup, checkpoint_save, checkpoint_load, evaluation, idle, other, unaccounted.
  GoodputBreakdown seconds;
  std::map<std::string, double> other_by_name;
  std::vector<double> startup_of_attempt;  // in attempt order
};

// Runs the sweep over resolved attempts (resolve_attempts) and sets each step's `covered`.
WallShares sweep_wall_time(ledger::Events& events, double wall_start, double wall_end);

}  // namespace tetra::launch
