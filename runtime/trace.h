// Tracer: timed regions of the training step for the Chrome trace (RUN_DIR/trace.json) and the
// per-op profile. Regions are ops (every call through runtime/ops.h), layers (pipeline
// instructions F/B/W), communication and whole steps. On CUDA a region is a pair of events on the
// current stream, resolved to device timestamps at the end of the step; on the CPU, host times.
// Off by default: a disabled tracer costs one branch per op.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/device.h"

namespace tetra {

class Tracer {
 public:
  static Tracer& instance();
  bool enabled() const { return enabled_; }
  // Starts tracing on `device`; `track` names this process in the trace (e.g. "rank 0").
  void start(Device device, int pid, const std::string& track);
  void stop() { enabled_ = false; }

  // A region on the current stream of the traced device ("cat": op, layer, step).
  void begin(const char* name, const char* cat);
  void end();
  // A region already timed elsewhere (communication), in µs since the epoch of this trace, on the
  // row named `thread` ("compute", "communication", or any other name: a row of its own).
  void complete(const std::string& name, const char* cat, const std::string& thread, double ts_us, double dur_us,
                nlohmann::json args = nlohmann::json::object());
  // The µs timestamp this trace gives to the current moment of the device stream (records an event).
  void mark_step_start();
  double step_start_us() const { return step_start_us_; }

  // Resolves the step's device events (synchronises) into trace events and the op profile.
  void end_step();

  nlohmann::json chrome_events() const { return events_; }
  struct OpStat {
    double total_ms = 0;
    int64_t calls = 0;
  };
  const std::map<std::string, OpStat>& op_profile() const { return op_profile_; }
  int steps() const { return steps_; }

 private:
  Tracer() = default;
  struct Region;
  bool enabled_ = false;
  Device device_;
  int pid_ = 0;
  std::vector<std::unique_ptr<Region>> open_, done_;
  nlohmann::json events_ = nlohmann::json::array();
  std::map<std::string, OpStat> op_profile_;
  std::map<std::string, int> extra_threads_;  // trace rows beyond compute and communication
  double host_epoch_us_ = 0, step_start_us_ = 0;
  std::unique_ptr<Region> step_anchor_;
  int steps_ = 0;
};

// RAII region; does nothing when the tracer is off.
class TraceScope {
 public:
  TraceScope(const char* name, const char* cat) : on_(Tracer::instance().enabled()) {
    if (on_) Tracer::instance().begin(name, cat);
  }
  ~TraceScope() {
    if (on_) Tracer::instance().end();
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  bool on_;
};

}  // namespace tetra
