// The step executions in the goodput report (launch/report/goodput.h): lost ones count as lost to
// failures; kept ones whose update was skipped (non-finite) as skipped steps; the other kept ones
// split the wall time the sweep gave them (launch/report/sweep.h) into productive time and the
// step-level badput the trainer measured inside them.
#pragma once
#include <cstdint>
#include <set>

#include "launch/report/goodput.h"
#include "launch/report/ledger.h"

namespace tetra::launch {

// Adds the steps' seconds, tokens and counts to `report` (its seconds, steps and tokens kept and
// lost, lost_steps, kept_step_seconds, exposed_comm_by_axis, first and last kept step). Steps are
// those of mark_kept_steps, covered by sweep_wall_time. Returns the kept step numbers.
std::set<int64_t> account_steps(const ledger::Events& events, GoodputReport& report, ledger::WarningTally& tally);

}  // namespace tetra::launch
