#include "runtime/trace.h"

#include <chrono>

#include "runtime/stream.h"

namespace tetra {

namespace {
double host_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

struct Tracer::Region {
  std::string name;
  const char* cat = "";
  int depth = 0;
  double host_begin = 0, host_end = 0;
  std::unique_ptr<Event> begin, end;
};

Tracer& Tracer::instance() {
  static Tracer t;
  return t;
}

void Tracer::start(Device device, int pid, const std::string& track) {
  device_ = device;
  pid_ = pid;
  enabled_ = true;
  host_epoch_us_ = host_us();
  events_.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", track}}}});
  events_.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", 1}, {"args", {{"name", "compute"}}}});
  events_.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", 2}, {"args", {{"name", "communication"}}}});
}

void Tracer::mark_step_start() {
  step_anchor_ = std::make_unique<Region>();
  step_anchor_->host_begin = host_us() - host_epoch_us_;
  if (device_.is_cuda()) {
    step_anchor_->begin = std::make_unique<Event>(device_);
    step_anchor_->begin->record(current_stream(device_));
  }
  step_start_us_ = step_anchor_->host_begin;
}

void Tracer::begin(const char* name, const char* cat) {
  auto r = std::make_unique<Region>();
  r->name = name;
  r->cat = cat;
  r->depth = static_cast<int>(open_.size());
  if (device_.is_cuda()) {
    r->begin = std::make_unique<Event>(device_);
    r->begin->record(current_stream(device_));
  } else {
    r->host_begin = host_us() - host_epoch_us_;
  }
  open_.push_back(std::move(r));
}

void Tracer::end() {
  if (open_.empty()) return;
  std::unique_ptr<Region> r = std::move(open_.back());
  open_.pop_back();
  if (device_.is_cuda()) {
    r->end = std::make_unique<Event>(device_);
    r->end->record(current_stream(device_));
  } else {
    r->host_end = host_us() - host_epoch_us_;
  }
  done_.push_back(std::move(r));
}

void Tracer::complete(const std::string& name, const char* cat, const std::string& thread, double ts_us,
                      double dur_us, nlohmann::json args) {
  // "compute" and "communication" have their rows from start(); any other name (a communication
  // stream per mesh axis) gets the next row, named at its first event.
  int tid = thread == "compute" ? 1 : thread == "communication" ? 2 : 0;
  if (tid == 0) {
    auto it = extra_threads_.find(thread);
    if (it == extra_threads_.end()) {
      it = extra_threads_.emplace(thread, 3 + static_cast<int>(extra_threads_.size())).first;
      events_.push_back(
          {{"ph", "M"}, {"name", "thread_name"}, {"pid", pid_}, {"tid", it->second}, {"args", {{"name", thread}}}});
    }
    tid = it->second;
  }
  events_.push_back({{"ph", "X"}, {"name", name}, {"cat", cat}, {"pid", pid_}, {"tid", tid}, {"ts", ts_us},
                     {"dur", dur_us}, {"args", std::move(args)}});
}

void Tracer::end_step() {
  if (!enabled_) return;
  // Device times are placed relative to the step anchor, whose device time is taken to be its
  // host time: the trace shows the GPU's timeline, shifted to start with the step.
  for (auto& r : done_) {
    double ts = 0, dur = 0;
    if (device_.is_cuda()) {
      if (!step_anchor_ || !step_anchor_->begin) continue;
      ts = step_anchor_->host_begin + 1e3 * r->begin->elapsed_ms(*step_anchor_->begin);
      dur = 1e3 * r->end->elapsed_ms(*r->begin);
    } else {
      ts = r->host_begin;
      dur = r->host_end - r->host_begin;
    }
    events_.push_back({{"ph", "X"}, {"name", r->name}, {"cat", r->cat}, {"pid", pid_}, {"tid", 1}, {"ts", ts},
                       {"dur", dur}});
    if (std::string(r->cat) == "op") {
      OpStat& s = op_profile_[r->name];
      s.total_ms += dur / 1e3;
      ++s.calls;
    }
  }
  done_.clear();
  ++steps_;
}

}  // namespace tetra
