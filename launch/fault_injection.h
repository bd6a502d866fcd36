// Fault injection for failure drills and the failure tests (docs/operations.md, "Drills"). The
// environment variable TETRA_FAULT holds comma-separated faults ACTION@STEP[:rank=R]; rank R
// (default 0) acts right after step STEP (1-based) of every attempt that runs that step:
//   kill   raise SIGKILL on itself (a crashed process or node)
//   stop   raise SIGSTOP on itself (a hung rank: its peers' collectives time out)
//   term   raise SIGTERM on itself (preemption)
//   usr1   raise SIGUSR1 on itself (SLURM's warning before the time limit)
//   nan    make its loss of step STEP non-finite, before the update (train.on_nonfinite)
// Unset, it costs nothing. A malformed value is a Usage error before any work.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tetra::launch {

class FaultPlan {
 public:
  enum class Action { Kill, Stop, Term, Usr1, Nan };
  struct Fault {
    Action action;
    int64_t step;
    int rank;
  };

  FaultPlan() = default;
  // Parses `spec` (the syntax above); throws a Usage error naming the bad part.
  static FaultPlan parse(const std::string& spec);
  // From TETRA_FAULT (empty plan when unset).
  static FaultPlan from_environment();

  bool empty() const { return faults_.empty(); }
  const std::vector<Fault>& faults() const { return faults_; }
  // Raises the signals planned for `rank` after `step`; prints what it does first.
  void after_step(int64_t step, int rank) const;
  // True when `rank`'s loss of `step` is to be made non-finite.
  bool poison_loss(int64_t step, int rank) const;

 private:
  std::vector<Fault> faults_;
};

}  // namespace tetra::launch
