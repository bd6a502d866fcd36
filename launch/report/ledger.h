// The goodput ledger read for the report (launch/report/goodput.h): the events of RUN_DIR/goodput.jsonl
// (runtime/goodput_clock.h documents them) sorted by kind and attempt, with the ledger's oddities
// tallied. The phases of compute_goodput work on these: the attempts (launch/report/attempts.h),
// the sweep over the time line (launch/report/sweep.h), the kept steps (launch/report/step_badput.h).
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tetra::launch::ledger {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// One attempt as its events describe it. Times are Unix seconds.
struct Attempt {
  int id = 0;
  bool has_start = false;
  double start = kInf;
  std::string host;
  int world_size = 0;
  bool has_end = false;
  double end_time = 0;
  std::string reason;
  std::optional<int> exit_code;
  double first_event = kInf;  // earliest time of any event (the start when attempt_start is missing)
  double last_event = -kInf;  // latest time of any event
  double first_work = kInf;   // earliest start of a step, eval, ckpt_save or other span
  double end = 0;             // resolved end (resolve_attempts)
};

// One execution of a step. The step-level parts are seconds inside [start, end].
struct StepExec {
  int attempt = 0;
  int64_t step = 0;
  double start = 0, end = 0;
  std::optional<int64_t> tokens;
  double exposed_comm = 0, bubble = 0, recompute = 0, optimizer = 0, data_wait = 0, host_overhead = 0;
  std::map<std::string, double> exposed_by_axis;  // optional split of exposed_comm
  size_t order = 0;  // position in the ledger, to break ties
  bool skipped = false;  // its update was not applied (train.on_nonfinite: skip)
  bool kept = false;
  double covered = 0;  // seconds of wall time the sweep gave to this step
};

// An eval, ckpt_save, ckpt_load or other span.
struct Span {
  int attempt = 0;
  double start = 0, end = 0;
  std::optional<int64_t> step;
  bool failed = false;
  std::string name;  // "other" spans
  size_t order = 0;
};

struct RunInfoEvent {
  int attempt = 0;
  double time = 0;
  size_t order = 0;
  double flops_per_token = 0, peak = 0;
  int devices = 0;
  int64_t tokens_per_step = 0;
  std::string precision, device_kind;
  std::string data_io, data_io_reason;  // optional
};

// Counts repeated oddities so that a long ledger yields one warning per kind, not one per line.
class WarningTally {
 public:
  void add(const std::string& what) { ++counts_[what]; }
  void flush(std::vector<std::string>& out) const {
    for (const auto& [what, n] : counts_)
      out.push_back(n == 1 ? what : what + " (" + std::to_string(n) + " times)");
  }

 private:
  std::map<std::string, int64_t> counts_;
};

struct Events {
  std::map<int, Attempt> attempts;  // by id; every attempt that any event names
  std::vector<StepExec> steps;      // in ledger order (mark_kept_steps sorts them)
  std::vector<Span> evals, saves, loads, others;  // in ledger order
  std::vector<RunInfoEvent> infos;  // by attempt, then time, then ledger order
};

// Sorts the events by kind and attempt, skipping (and tallying) those that cannot be used. Fails
// (ErrorKind::Data) when no event names an attempt.
Events parse(const std::vector<nlohmann::json>& events, WarningTally& tally);

}  // namespace tetra::launch::ledger
