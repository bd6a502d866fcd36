#include "parallel/comm_scheduler.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "runtime/nvtx.h"

namespace tetra {

namespace {
double host_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

// Device-side bookkeeping of one collective: the Work and the events around it.
struct CommScheduler::Pending {
  std::unique_ptr<Work> work;
  std::unique_ptr<Event> ready;                  // compute → comm: the inputs are ready
  std::unique_ptr<Event> start, end;             // on the comm stream, around the collective
  std::unique_ptr<Event> wait_begin, wait_end;   // on the compute stream, around the wait
  std::unique_ptr<Event> finished;               // after `end`: compute waits on it, which also joins
                                                 // the timing record into a captured graph
};

CommScheduler::CommScheduler(Device device) : device_(device) {
  // Higher-priority streams, so collectives start as soon as their inputs are ready
  // (TETRA_COMM_STREAM_PRIORITY=0: the compute stream's priority, for comparison).
  const char* prio = std::getenv("TETRA_COMM_STREAM_PRIORITY");
  priority_ = prio && std::string(prio) == "0" ? 0 : -1;
  comm_stream(MeshAxis::DP);  // data parallelism's stream exists from the start, as it always did
}

const Stream& CommScheduler::comm_stream(MeshAxis axis) {
  const auto a = static_cast<size_t>(axis);
  TETRA_CHECK(a < comm_.size(), "CommScheduler: mesh axis ", static_cast<int>(axis));
  if (!created_[a]) {
    if (device_.is_cuda()) comm_[a] = Stream::create(device_, priority_);
    created_[a] = true;
  }
  return comm_[a];
}

CommScheduler::~CommScheduler() = default;

void CommScheduler::StepRecords::clear() {
  records.clear();
  pending.clear();
  step_start.reset();
}

void CommScheduler::begin_step(bool for_graph, int slot) {
  TETRA_CHECK(slot >= 0 && slot < kSlots, "CommScheduler: slot ", slot);
  active_ = for_graph ? &graph_[slot] : &eager_[slot];
  replaying_[slot] = for_graph;
  active_->clear();
  host_start_ = host_ms();
  if (device_.is_cuda()) {
    active_->step_start = std::make_unique<Event>(device_);
    active_->step_start->record_timing(current_stream(device_));
  }
}

void CommScheduler::begin_replay(int slot) {
  TETRA_CHECK(slot >= 0 && slot < kSlots, "CommScheduler: slot ", slot);
  TETRA_CHECK(graph_[slot].step_start != nullptr, "CommScheduler::begin_replay before a step was captured");
  active_ = &graph_[slot];
  replaying_[slot] = true;
  host_start_ = host_ms();
}

CommScheduler::Ticket CommScheduler::issue(const std::string& name, int64_t bytes,
                                           const std::function<std::unique_ptr<Work>()>& launch, MeshAxis axis) {
  Record r;
  r.name = name;
  r.axis = axis;
  r.bytes = bytes;
  r.issued_ms = host_ms() - host_start_;
  nvtx::Range range(name);  // the trace's name of the collective, around its launch
  auto p = std::make_unique<Pending>();
  if (device_.is_cuda()) {
    const Stream comm = comm_stream(axis);
    Stream compute = current_stream(device_);
    p->ready = std::make_unique<Event>(device_);
    p->ready->record(compute);
    p->ready->block(comm);
    StreamGuard on_comm(comm);
    p->start = std::make_unique<Event>(device_);
    p->start->record_timing(comm);
    p->work = launch();
    p->end = std::make_unique<Event>(device_);
    p->end->record_timing(comm);
    p->finished = std::make_unique<Event>(device_);
    p->finished->record(comm);
  } else {
    p->work = launch();
  }
  Ticket t;
  t.index_ = active_->records.size();
  active_->records.push_back(std::move(r));
  active_->pending.push_back(std::move(p));
  return t;
}

void CommScheduler::wait(Ticket& t) {
  if (t.waited_) return;
  TETRA_CHECK(t.index_ < active_->pending.size(), "CommScheduler::wait on a ticket of an earlier step");
  Pending& p = *active_->pending[t.index_];
  if (device_.is_cuda()) {
    Stream compute = current_stream(device_);
    p.wait_begin = std::make_unique<Event>(device_);
    p.wait_begin->record_timing(compute);
    p.work->wait();  // device-side: compute waits on the collective's event
    p.finished->block(compute);
    p.wait_end = std::make_unique<Event>(device_);
    p.wait_end->record_timing(compute);
  } else {
    double t0 = host_ms();
    p.work->wait();
    active_->records[t.index_].waited_ms = host_ms() - t0;
  }
  t.waited_ = true;
}

const std::vector<CommScheduler::Record>& CommScheduler::end_step(int slot) {
  TETRA_CHECK(slot >= 0 && slot < kSlots, "CommScheduler: slot ", slot);
  active_ = replaying_[slot] ? &graph_[slot] : &eager_[slot];
  StepRecords& a = *active_;
  if (device_.is_cuda() && a.step_start) {
    for (size_t i = 0; i < a.pending.size(); ++i) {
      Pending& p = *a.pending[i];
      Record& r = a.records[i];
      if (p.start && p.end) {
        r.start_ms = p.start->elapsed_ms(*a.step_start);
        r.end_ms = p.end->elapsed_ms(*a.step_start);
      }
      if (p.wait_begin && p.wait_end) r.waited_ms = p.wait_end->elapsed_ms(*p.wait_begin);
    }
  }
  return a.records;
}

std::string CommScheduler::first_unfinished(int slot) const {
  TETRA_CHECK(slot >= 0 && slot < kSlots, "CommScheduler: slot ", slot);
  const StepRecords& a = replaying_[slot] ? graph_[slot] : eager_[slot];
  for (size_t i = 0; i < a.pending.size(); ++i)
    if (a.pending[i]->end && !a.pending[i]->end->query()) return a.records[i].name;
  return "";
}

double CommScheduler::exposed_ms() const {
  double s = 0;
  for (const Record& r : active_->records) s += r.waited_ms;
  return s;
}

double CommScheduler::exposed_ms(MeshAxis axis) const {
  double s = 0;
  for (const Record& r : active_->records)
    if (r.axis == axis) s += r.waited_ms;
  return s;
}

}  // namespace tetra
