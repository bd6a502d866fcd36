// The goodput report (ARCHITECTURE.md §7): where every second of a job's wall time went, computed
// from the ledger RUN_DIR/goodput.jsonl that all its attempts appended to (runtime/goodput_clock.h
// documents the events). Printed by `tetra report RUN_DIR` and at the end of `tetra train`, and
// written to RUN_DIR/goodput.json. docs/goodput.md explains each category.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace tetra::launch {

// Seconds of the job's wall time by what they went into; each second is counted exactly once, so
// the fields sum to the wall time.
struct GoodputBreakdown {
  double productive = 0;        // kept steps, less the step-level badput inside them
  // job level
  double startup = 0;           // process start → first step (or other span), less checkpoint load
  double checkpoint_save = 0;   // the part of saves that blocked training
  double checkpoint_load = 0;
  double evaluation = 0;
  double data_stall = 0;        // data_wait inside kept steps
  double lost_to_failures = 0;  // steps whose results were thrown away (redone after a restart)
  double skipped_steps = 0;     // steps whose update was skipped (non-finite loss or gradient)
  double idle = 0;              // between one attempt's last event and the next attempt's start
  double other = 0;             // "other" spans (by name in GoodputReport::other_by_name)
  // step level, inside kept steps
  double exposed_comm = 0;
  double pipeline_bubble = 0;
  double recompute = 0;
  double optimizer = 0;
  double host_overhead = 0;
  // time inside an attempt that no event covers (between spans, after the last one)
  double unaccounted = 0;

  // Every category but productive, in report order, as (JSON name, seconds).
  std::vector<std::pair<std::string, double>> badput() const;
  double total() const;  // productive + every badput category
};

// One process launch of the job.
struct AttemptSummary {
  int attempt = 0;
  std::string host;
  int world_size = 0;
  double start = 0;                 // Unix seconds (process start)
  double end = 0;                   // attempt_end, else its last event
  std::string end_reason;           // "" when it has no attempt_end (crashed, killed, or running)
  std::optional<int> exit_code;
  int64_t steps = 0;                // step events it recorded
  int64_t first_step = 0, last_step = 0;  // 0 when it recorded no step
  std::optional<int64_t> restored_step{};  // from its ckpt_load
  double startup_seconds = 0;
};

// Consecutive step executions of one attempt whose results were thrown away (lost to failures).
struct LostSteps {
  int attempt = 0;
  int64_t first_step = 0, last_step = 0;  // step numbers, inclusive
  int64_t executions = 0;
  double start = 0, end = 0;              // Unix seconds: the first one's start, the last one's end
};

// A timed span of the job: an evaluation, a checkpoint save (its blocking part) or load.
struct JobSpan {
  int attempt = 0;
  double start = 0, end = 0;  // Unix seconds
  std::optional<int64_t> step;
  bool failed = false;
};

struct GoodputReport {
  std::string source;        // the ledger the report was computed from ("" when given events)
  double wall_start = 0;     // first attempt_start (Unix seconds)
  double wall_end = 0;       // end of the last attempt
  double wall_seconds = 0;
  double goodput = 0;        // productive / wall, in [0, 1]
  GoodputBreakdown seconds;
  std::map<std::string, double> other_by_name;  // the "other" category, split by span name
  // The part of exposed_comm of each mesh axis ("dp", "tp", ...), from steps that recorded it.
  std::map<std::string, double> exposed_comm_by_axis;

  std::vector<AttemptSummary> attempts;
  int restarts = 0;          // attempts - 1
  bool finished = false;     // the last attempt ended with reason "finished"

  int64_t steps_kept = 0;    // distinct steps whose last execution was kept
  int64_t steps_lost = 0;    // step executions whose results were thrown away
  int64_t steps_skipped = 0; // steps whose last execution skipped its update: neither kept nor lost
  int64_t first_kept_step = 0, last_kept_step = 0;
  std::optional<int64_t> last_checkpoint_step;  // of the last successful ckpt_save
  // Kept steps after the last checkpoint of a last attempt that did not finish: a resume redoes them.
  int64_t steps_at_risk = 0;
  int64_t tokens_kept = 0;
  int64_t tokens_lost = 0;
  // Where the job's time went, for pictures of the run (launch/report/html_page.h): the lost step
  // executions in runs (by attempt, then time), and the spans of the ledger (by start).
  std::vector<LostSteps> lost_steps;
  std::vector<JobSpan> evaluations, checkpoint_saves, checkpoint_loads;

  double tokens_per_s = 0;             // kept tokens / wall time
  double tokens_per_productive_s = 0;  // kept tokens / productive time
  double kept_step_seconds = 0;        // wall time of kept steps (productive + step-level badput)

  // From the last run_info; absent when the ledger has none (or its values are 0).
  std::optional<double> flops_per_token;
  std::optional<double> peak_flops_per_device;
  std::optional<int> devices;
  std::string precision, device_kind;
  std::string data_io, data_io_reason;            // the loader's read path and why; "" if not recorded
  std::optional<double> achieved_flops_per_s;     // flops_per_token · tokens_per_s
  std::optional<double> mfu;                      // achieved / (peak · devices), over the wall time
  std::optional<double> mfu_in_steps;             // the same over the time of kept steps only

  std::vector<std::string> warnings;  // what was odd in the ledger and how it was handled
};

// Computes the report from ledger events (any order; attempts are told apart by "attempt").
// Fails (ErrorKind::Data) when there is nothing to report on.
GoodputReport compute_goodput(const std::vector<nlohmann::json>& events);
// Reads RUN_DIR/goodput.jsonl (skipping, with a warning, a last line cut by a crash) and computes.
GoodputReport load_and_compute(const std::string& run_dir);

void print_report(const GoodputReport& report, std::ostream& out);
nlohmann::json to_json(const GoodputReport& report);
// Writes to_json(report) to RUN_DIR/goodput.json (atomically: a temporary file, then rename).
void write_report(const std::string& run_dir, const GoodputReport& report);

}  // namespace tetra::launch
