// Agreeing on the outcome of work that can fail on some ranks only (docs/operations.md, "Errors
// seen by one rank"). A rank that fails alone and leaves would leave its peers waiting in their
// next collective (MPI_Comm_split, NCCL initialisation, an all-reduce), so work that depends on
// this rank's environment — files, directories, devices, rank 0's run directory — runs inside
// agree(): one small all-reduce after it tells every rank whether any rank failed, and then every
// rank throws the same AgreedError (the lowest failing rank's kind and message). The job ends
// with one message and one exit code, no rank waiting. The work itself must not communicate.
// Errors that are not agreed (one rank, in the middle of training) abort the job instead
// (launch/cli/train.cpp).
#pragma once
#include <functional>
#include <string>

#include "runtime/communicator.h"
#include "runtime/error.h"

namespace tetra::launch {

// An error every rank of the job holds at the same point: it may end the job without MPI_Abort.
class AgreedError : public Error {
 public:
  AgreedError(ErrorKind kind, const std::string& message, int origin_rank)
      : Error(kind, message), origin_rank_(origin_rank) {}
  int origin_rank() const { return origin_rank_; }  // the rank that failed (the lowest, if several)

 private:
  int origin_rank_;
};

// Collective over `world`: runs `work` on this rank, then throws AgreedError on every rank when it
// threw (tetra::Error, any std::exception) on any. An AgreedError thrown by `work` itself is
// treated like any other error of its kind.
void agree(Communicator& world, const std::function<void()>& work);

// For code that has already learnt, through its own collective, that every rank fails alike
// (a failed checkpoint commit, a checkpoint that cannot be resumed): throws AgreedError.
[[noreturn]] void fail_on_every_rank(ErrorKind kind, const std::string& message, int origin_rank = 0);

}  // namespace tetra::launch
