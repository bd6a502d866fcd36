// The goodput clock and ledger (ARCHITECTURE.md §7). Rank 0 of every attempt (process launch) of a
// run appends what its time went into to RUN_DIR/goodput.jsonl, one JSON event per line, so that
// `tetra report` can account for every second of a job that crashed and resumed as one job.
//
// Times in events are Unix seconds (double): attempts run on different hosts and processes, and
// only wall-clock time can be compared across them. Within an attempt, GoodputClock derives those
// Unix times from the monotonic clock anchored once, so durations never jump with NTP.
//
// Event schema (docs/goodput.md has the full description and examples). Every line holds
// "event" (the kind below) and "attempt" (1, 2, ... in launch order); times are Unix seconds,
// durations are seconds, steps are numbered from 1 and a checkpoint of step N holds the state
// after step N.
//
//   attempt_start  time (process start), world_size, host, pid              [synced to disk]
//   run_info       time, flops_per_token, peak_flops_per_device, devices, tokens_per_step,
//                  precision, device_kind, data_io and data_io_reason (optional: the loader's read
//                  path and why it was chosen)
//   step           step, start, end, tokens, exposed_comm, bubble, recompute, optimizer,
//                  data_wait, host_overhead (seconds inside [start, end]), loss (optional),
//                  exposed_comm_by_axis (optional: {"dp": s, "tp": s, ...}, the part of
//                  exposed_comm of each mesh axis of size > 1)
//   eval           start, end, step
//   ckpt_save      start, end (of the part that blocked training), step, async,
//                  write_seconds (optional: total write time, when written in the background) [synced]
//   ckpt_load      start, end, step (the step restored)                      [synced]
//   other          name, start, end (any other span: compilation, profiler dump, ...)
//   attempt_end    time, reason ("finished" | "signal" | "error" | "preempted" | ...), exit_code
//                  (null when unknown)                                       [synced]
// Spans ended by an exception carry "failed": true.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tetra {

class JsonlAppender;
struct JsonlProblem;

// ---- clocks ---------------------------------------------------------------------------------
double unix_now();       // wall clock: seconds since 1970-01-01 UTC
double monotonic_now();  // steady clock, seconds since an arbitrary origin; for durations only
// When this process started, in Unix seconds (Linux: from /proc, 10 ms resolution), so that the
// time before main() counts as startup. Falls back to the time of the first call elsewhere.
double process_start_unix_time();
std::string host_name();

// Unix time that advances with the monotonic clock from one anchor (taken at construction).
class GoodputClock {
 public:
  GoodputClock();
  double now() const;                   // Unix seconds
  double to_unix(double monotonic) const;  // a monotonic_now() reading as Unix seconds

 private:
  double unix_anchor_;
  double monotonic_anchor_;
};

// ---- event payloads --------------------------------------------------------------------------
// What the job runs on, and what its tokens cost: the report's TFLOP/s and MFU come from here.
struct RunInfo {
  double flops_per_token = 0;        // model FLOPs per trained token (forward + backward)
  double peak_flops_per_device = 0;  // peak FLOP/s of one device at `precision`
  int devices = 0;                   // devices (ranks) that train
  int64_t tokens_per_step = 0;       // global batch × sequence length
  std::string precision;             // "bf16", "fp32", ...
  std::string device_kind;           // "NVIDIA H100 80GB HBM3", "cpu", ...
  std::string data_io;               // optional: the data loader's read path ("gds", "pinned", "posix")
  std::string data_io_reason;        // optional: why that path (data/io_path.h)
};

// Seconds of a step that did not advance the model, measured by the trainer (reduced over ranks:
// rank 0 records the mean or the critical rank's values). Each lies inside the step's span.
struct StepBreakdown {
  double exposed_comm = 0;   // compute waiting on communication
  std::map<std::string, double> exposed_comm_by_axis;  // its split by mesh axis ("dp", "tp", ...)
  double bubble = 0;         // pipeline idle time
  double recompute = 0;      // forward passes redone for activation recomputation
  double optimizer = 0;      // optimizer step (incl. its communication)
  double data_wait = 0;      // waiting on the data loader
  double host_overhead = 0;  // launch latency, synchronisation, Python-free but still host-bound time
};

struct StepTiming {
  int64_t step = 0;     // 1-based
  double start = 0;     // Unix seconds (GoodputLedger::now())
  double end = 0;
  int64_t tokens = 0;   // tokens trained in this step (global)
  StepBreakdown breakdown;
  std::optional<double> loss;
  bool skipped = false;  // its update was not applied (non-finite loss or gradient): not kept
};

// Event kind names, shared by writer and reader.
namespace goodput_event {
inline constexpr const char* kAttemptStart = "attempt_start";
inline constexpr const char* kRunInfo = "run_info";
inline constexpr const char* kStep = "step";
inline constexpr const char* kEval = "eval";
inline constexpr const char* kCkptSave = "ckpt_save";
inline constexpr const char* kCkptLoad = "ckpt_load";
inline constexpr const char* kOther = "other";
inline constexpr const char* kAttemptEnd = "attempt_end";
}  // namespace goodput_event

// ---- the ledger -----------------------------------------------------------------------------
// The writer of RUN_DIR/goodput.jsonl for one attempt. Only rank 0 opens it. Every event is one
// line written with one write(2): a crash loses at most that line. attempt_start, checkpoint and
// attempt_end events are also synced to disk. Safe to call from several threads (an async
// checkpoint writer may record its ckpt_save from its own thread).
class GoodputLedger {
 public:
  // Opens `path` for appending; this attempt's id is 1 + the largest "attempt" in the file (1 for
  // a new file). A last line cut short by a crash is dropped with a warning.
  explicit GoodputLedger(const std::string& path);
  // Records attempt_end (reason "error" while an exception unwinds, "closed" otherwise) if the
  // attempt started and did not end yet.
  ~GoodputLedger();
  GoodputLedger(const GoodputLedger&) = delete;
  GoodputLedger& operator=(const GoodputLedger&) = delete;

  static std::string path_in(const std::string& run_dir);  // RUN_DIR/goodput.jsonl

  int attempt() const { return attempt_; }
  const std::string& path() const;
  double now() const { return clock_.now(); }  // the timestamp for this attempt's events
  const GoodputClock& clock() const { return clock_; }

  // The first event of an attempt; every other event needs it first.
  void attempt_start(double process_start, int world_size, const std::string& host = host_name());
  void run_info(const RunInfo& info, double time);
  void run_info(const RunInfo& info) { run_info(info, now()); }
  void step(const StepTiming& step);
  void eval(double start, double end, int64_t step);
  // `end` is when training could go on; `write_seconds` the total write time if it ran async.
  void ckpt_save(double start, double end, int64_t step, std::optional<double> write_seconds = std::nullopt);
  void ckpt_load(double start, double end, int64_t step);
  void other(const std::string& name, double start, double end);
  void attempt_end(const std::string& reason, std::optional<int> exit_code, double time);
  void attempt_end(const std::string& reason, std::optional<int> exit_code) { attempt_end(reason, exit_code, now()); }
  bool started() const { return started_; }
  bool ended() const { return ended_; }

  // Appends any event: `event` must be an object with a string "event"; "attempt" is added.
  void append(nlohmann::json event, bool durable = false);

 private:
  void require_started(const char* what) const;

  GoodputClock clock_;
  std::unique_ptr<JsonlAppender> file_;
  int attempt_ = 0;
  bool started_ = false;
  bool ended_ = false;
  mutable std::mutex mutex_;
};

// The largest "attempt" recorded in the ledger at `path` (0 if the file is missing or empty). It
// scans lines for the "attempt" key instead of parsing them, so it is fast on long ledgers. Lines
// that are damaged (not UTF-8, not {...}, an attempt outside 1..2^31-2) are skipped and, with
// `skipped`, described there, as the report skips them.
int max_attempt_in(const std::string& path, std::vector<JsonlProblem>* skipped = nullptr);

// RAII: times a span from construction to end() or destruction and records it as an event of its
// kind (eval, ckpt_save with async=false, ckpt_load, or other). A span ended by an exception is
// still recorded, with "failed": true. An async checkpoint's total write time is known only when
// its writer is done: record that one with GoodputLedger::ckpt_save instead.
class GoodputSpan {
 public:
  enum class Kind { Eval, CkptSave, CkptLoad, Other };
  GoodputSpan(GoodputLedger& ledger, Kind kind, int64_t step = 0, std::string name = {});
  ~GoodputSpan();
  GoodputSpan(const GoodputSpan&) = delete;
  GoodputSpan& operator=(const GoodputSpan&) = delete;

  void set_step(int64_t step) { step_ = step; }  // e.g. the step a load turned out to restore
  void end();                                    // records the span now; later calls do nothing
  double start() const { return start_; }

 private:
  void record(bool failed);

  GoodputLedger& ledger_;
  Kind kind_;
  int64_t step_;
  std::string name_;
  double start_;
  bool done_ = false;
  int uncaught_at_start_;
};

}  // namespace tetra
