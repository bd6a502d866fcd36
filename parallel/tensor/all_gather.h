// All-gather of sequence-parallel row shards over the tensor-parallel group, alone or with a
// consumer of each gathered chunk (the GEMM an all-gather feeds: parallel/tensor/linear.h). Shapes:
// shard [M, K] on every rank, gathered [N, K] with N = tp·M, rank q's shard at rows [q·M, (q+1)·M).
//
// all_gather_then (docs/tensor_parallel.md, "all-gather → GEMM"):
//   plain (g.overlap() false): one all-gather (NCCL / MPI), compute waits for all of it, then
//     consume(q, rows q) for q = r, r−1, …, r−tp+1 (mod tp);
//   overlapped: a ring of tp−1 steps on the TP communication stream; step s sends the chunk that
//     arrived at step s−1 (at step 1: this rank's own) to rank r+1 and receives chunk r−s from rank
//     r−1, both in one batch, so no order of ranks deadlocks. consume(r) runs at once on this
//     rank's own shard while step 1 moves, and consume(r−s) as soon as step s has arrived, while
//     step s+1 moves. Compute waits on events only (no host wait on the GPU).
// Both paths call consume with the same chunks in the same order and the same memory, so the
// results are bit-identical. consume(q, rows) must only write what depends on chunk q (e.g. rows q
// of an output); it runs on the compute stream.
#pragma once
#include <functional>
#include <optional>

#include "parallel/tensor/group.h"

namespace tetra::tp {

using ChunkConsumer = std::function<void(int chunk, const Tensor& rows)>;

// gathered [N, K] (filled completely on return; the caller may keep it, e.g. for a weight
// gradient) from shard [M, K]; consume may be empty (a plain gather, which ignores overlap).
// gathered and shard may not overlap.
void all_gather_then(TpGroup& g, Tensor& gathered, const Tensor& shard, const ChunkConsumer& consume,
                     const char* what = "all_gather");

// gathered [N, K] = all_gather_rows(shard [M, K]), finished on return (one collective).
void all_gather_rows(TpGroup& g, Tensor& gathered, const Tensor& shard);

// An all-gather in flight: start() issues it on the TP stream and returns; wait() makes compute
// wait for it. For work that can run meanwhile: re-gathering a column-parallel layer's input for
// its weight gradient while the input-gradient GEMMs run. gathered and shard must stay allocated
// and unwritten until wait().
class PendingAllGather {
 public:
  static PendingAllGather start(TpGroup& g, Tensor& gathered, const Tensor& shard);
  void wait();
  bool pending() const { return ticket_.has_value() && !ticket_->done(); }

 private:
  TpGroup* g_ = nullptr;
  std::optional<CommScheduler::Ticket> ticket_;
};

}  // namespace tetra::tp
