// Fault injection for failure drills and the failure tests (docs/operations.md, "Drills"). The
// environment variable TETRA_FAULT holds comma-separated faults ACTION@STEP[:rank=R]; rank R
// (default 0) acts at step STEP (1-based) of every attempt that runs that step:
//   kill          raise SIGKILL on itself after the step (a crashed process or node)
//   stop          raise SIGSTOP on itself after the step (a hung rank: its peers' collectives time out)
//   term          raise SIGTERM on itself after the step (preemption)
//   usr1          raise SIGUSR1 on itself after the step (SLURM's warning before the time limit)
//   nan           make its loss of step STEP non-finite, before the update (train.on_nonfinite)
//   nan_grad      make one element of one gradient of step STEP non-finite, the loss staying finite
//   stop_in_step  raise SIGSTOP on itself inside step STEP, after the first micro-batch's forward:
//                 its peers wait in that step's gradient collectives (on a GPU: inside NCCL)
//   kill_in_save  raise SIGKILL on itself in the middle of writing its file of the checkpoint of
//                 step STEP (with checkpoint.async, on the writer thread while training goes on)
//   save_error    its write of the checkpoint of step STEP fails, as on a full disk
//   data_stall    waits 0.5 s for its first micro-batch of step STEP (slow storage on one node)
// Unset, it costs nothing. A malformed value is a Usage error before any work.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tetra::launch {

class FaultPlan {
 public:
  enum class Action { Kill, Stop, Term, Usr1, Nan, NanGrad, StopInStep, KillInSave, SaveError, DataStall };
  struct Fault {
    Action action;
    int64_t step;
    int rank;
  };

  FaultPlan() = default;
  // Parses `spec` (the syntax above); throws a Usage error naming the bad part.
  static FaultPlan parse(const std::string& spec);
  // From TETRA_FAULT (empty plan when unset); a fault on a rank outside 0..world_size-1 is a Usage
  // error (it would never happen, and the drill would pass for the wrong reason).
  static FaultPlan from_environment(int world_size);

  bool empty() const { return faults_.empty(); }
  const std::vector<Fault>& faults() const { return faults_; }
  // Raises the signals planned for `rank` after `step`; prints what it does first.
  void after_step(int64_t step, int rank) const;
  // True when `rank`'s loss of `step` is to be made non-finite.
  bool poison_loss(int64_t step, int rank) const;
  // True when one of `rank`'s gradients of `step` is to be made non-finite.
  bool poison_grad(int64_t step, int rank) const;
  // Raises SIGSTOP when `rank` is to stop inside `step` (called after its first forward).
  void inside_step(int64_t step, int rank) const;
  // Raises SIGKILL when `rank` is to die while writing the checkpoint of `step` (called half-way
  // through the write), or throws (a Checkpoint error) when that write is to fail.
  void inside_save(int64_t step, int rank) const;
  // True when a fault acts on the host after `step` or inside step + 1: the trainer then finishes
  // `step` (and agrees on it) before it launches the next one.
  bool blocks_run_ahead(int64_t step) const;
  // Seconds `rank` waits for its data in `step` (a stall drill), 0 for none.
  double data_stall(int64_t step, int rank) const;

 private:
  std::vector<Fault> faults_;
};

}  // namespace tetra::launch
