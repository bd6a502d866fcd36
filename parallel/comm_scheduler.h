// CommScheduler: the communication streams of a device, one per mesh axis in use, and the events
// between them and compute (ARCHITECTURE.md §3). A collective is issued on its axis's stream after
// everything compute has issued so far; compute waits only where it needs the result, on an event.
// Every collective is recorded with its axis — when it was issued, when it ran, and how long
// compute waited for it — so exposed communication is measured per axis, not guessed.
//
// Streams: data parallelism's (MeshAxis::DP, the default of issue()) is created with the scheduler,
// as it always was; every other axis gets its own stream at its first collective, so that a
// tensor-parallel exchange never queues behind a gradient reduce-scatter (or the reverse).
//
// On the CPU backend streams are synchronous: MPI collectives progress while compute runs on the
// host, and the wait is the host time spent blocked in Work::wait().
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/mesh.h"
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

  // Marks the start of a step: records are kept per step, in one of kSlots slots, so that the
  // next step may be issued before this one's records are read (end_step(slot)). for_graph: the
  // step is being captured into a CUDA graph; its events become graph nodes, kept (apart from
  // eager steps' records) for every replay of that graph.
  static constexpr int kSlots = 2;
  void begin_step(bool for_graph = false, int slot = 0);
  // A replay of the graph captured in `slot` begins: end_step(slot) then reads the captured
  // step's events, which the replay records again.
  void begin_replay(int slot = 0);
  // Runs `launch` (which starts one collective and returns its Work) on the communication stream
  // of `axis`, ordered after all work issued so far on the compute stream. Memory the collective
  // uses must stay allocated until compute has waited for the ticket (runtime/memory.h: blocks are
  // released in the compute stream's order).
  Ticket issue(const std::string& name, int64_t bytes, const std::function<std::unique_ptr<Work>()>& launch,
               MeshAxis axis = MeshAxis::DP);
  // Compute (the current stream) waits for the ticket's collective.
  void wait(Ticket& t);

  struct Record {
    std::string name;
    MeshAxis axis = MeshAxis::DP;
    int64_t bytes = 0;
    double issued_ms = 0;  // host time since begin_step when issued
    double start_ms = -1;  // device time since begin_step when the collective began (CUDA), else -1
    double end_ms = -1;    // ... and when it finished
    double waited_ms = 0;  // time compute was blocked waiting for it (exposed communication)
  };
  // Resolves the device timings of the step begun in `slot` (waits for its events) and returns
  // its records; records() and exposed_ms() then refer to that step.
  const std::vector<Record>& end_step(int slot = 0);
  double exposed_ms() const;               // Σ waited_ms of the last end_step(), every axis
  double exposed_ms(MeshAxis axis) const;  // ... of the collectives of one axis
  // The first collective of the step begun in `slot` whose device work has not completed (its end
  // event has not fired), or "" when none has stalled (or on the CPU, where a wait that does not
  // complete throws naming its collective): what a step that does not finish is waiting for.
  std::string first_unfinished(int slot = 0) const;
  const std::vector<Record>& records() const { return active_->records; }
  // The communication stream of `axis` (CUDA: created on first use; the CPU stream on the CPU).
  const Stream& comm_stream(MeshAxis axis = MeshAxis::DP);

  static constexpr size_t kAxes = std::size(kMeshAxes);

 private:
  struct Pending;
  struct StepRecords {
    std::vector<Record> records;
    std::vector<std::unique_ptr<Pending>> pending;
    std::unique_ptr<Event> step_start;
    void clear();
  };
  Device device_;
  int priority_ = -1;                        // of every communication stream
  std::array<Stream, kAxes> comm_;           // indexed by MeshAxis; CUDA streams once created
  std::array<bool, kAxes> created_{};
  StepRecords eager_[kSlots], graph_[kSlots];
  bool replaying_[kSlots] = {false, false};  // the slot's last step is a graph replay
  StepRecords* active_ = &eager_[0];
  double host_start_ = 0;
};

}  // namespace tetra
