// The attempts of a job in the goodput report (launch/report/goodput.h): their extent on the wall
// time, which step executions the final model kept across restarts, and their summaries.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "launch/report/goodput.h"
#include "launch/report/ledger.h"

namespace tetra::launch {

// Resolves each attempt's start (its attempt_start, else its first event) and end (the latest of
// its attempt_end and its events), and sets the job's wall_start, wall_end and wall_seconds.
// Attempts that overlap are warned about in report.warnings.
void resolve_attempts(ledger::Events& events, GoodputReport& report, ledger::WarningTally& tally);

// Sorts the step executions (by attempt, end, ledger order) and marks those the final model kept:
// the last execution of a step number wins; a restore to step R (a ckpt_load, or an attempt whose
// first step is R+1) throws away the executions of steps > R that came before it.
void mark_kept_steps(ledger::Events& events);

// One summary per attempt, in attempt order; startup_seconds: the sweep's startup of each.
std::vector<AttemptSummary> summarize_attempts(const ledger::Events& events,
                                               const std::vector<double>& startup_seconds);

// The step of the last successful ckpt_save (by attempt, then end), if any.
std::optional<int64_t> last_checkpoint_step(const ledger::Events& events);

}  // namespace tetra::launch
