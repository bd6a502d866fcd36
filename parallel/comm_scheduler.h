// CommScheduler: the communication stream of a device and the events between it and compute
// (ARCHITECTURE.md §3). A collective is issued on the communication stream after everything
// compute has issued so far; compute waits only where it needs the result, on an event. Every
// collective is recorded — when it was issued, when it ran, and how long compute waited for it —
// so exposed communication is measured, not guessed.
//
// On the CPU backend streams are synchronous: MPI collectives progress while compute runs on the
// host, and the wait is the host time spent blocked in Work::wait().
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/stream.h"

namespace tetra {

class CommScheduler {
 public:
  explicit CommScheduler(Device device);
  ~CommScheduler();

  // One collective in flight.
  class Ticket {
   public:
    bool done() const { return waited_; }

   private:
    friend class CommScheduler;
    size_t index_ = 0;
    bool waited_ = false;
  };

  // Marks the start of a step: records are kept per step. for_graph: the step is being captured
  // into a CUDA graph; its events become graph nodes, kept (apart from eager steps' records) for
  // every replay of that graph.
  void begin_step(bool for_graph = false);
  // A replay of the captured step begins: end_step() then reads the captured step's events, which
  // the replay records again.
  void begin_replay();
  // Runs `launch` (which starts one collective and returns its Work) on the communication stream,
  // ordered after all work issued so far on the compute stream.
  Ticket issue(const std::string& name, int64_t bytes, const std::function<std::unique_ptr<Work>()>& launch);
  // Compute (the current stream) waits for the ticket's collective.
  void wait(Ticket& t);

  struct Record {
    std::string name;
    int64_t bytes = 0;
    double issued_ms = 0;  // host time since begin_step when issued
    double start_ms = -1;  // device time since begin_step when the collective began (CUDA), else -1
    double end_ms = -1;    // ... and when it finished
    double waited_ms = 0;  // time compute was blocked waiting for it (exposed communication)
  };
  // Resolves the step's device timings (synchronises the streams) and returns the records.
  const std::vector<Record>& end_step();
  double exposed_ms() const;  // Σ waited_ms of the last end_step()
  const std::vector<Record>& records() const { return active_->records; }
  const Stream& comm_stream() const { return comm_; }

 private:
  struct Pending;
  struct StepRecords {
    std::vector<Record> records;
    std::vector<std::unique_ptr<Pending>> pending;
    std::unique_ptr<Event> step_start;
    void clear();
  };
  Device device_;
  Stream comm_;
  StepRecords eager_, graph_;
  StepRecords* active_ = &eager_;
  double host_start_ = 0;
};

}  // namespace tetra
