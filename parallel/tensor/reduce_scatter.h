// Reduce-scatter (and all-reduce) of row chunks over the tensor-parallel group, fed by a producer
// of each chunk's partial result (the GEMM a reduce-scatter follows: parallel/tensor/linear.h).
// Shapes: every rank's partial result is [N, P] in tp chunks of M = N/tp rows; rank r ends with
// out [M, P] = Σ_q partial_q[chunk r] (+ b[P] + residual[M, P]).
//
// produce_then_reduce_scatter (docs/tensor_parallel.md, "GEMM → reduce-scatter"):
//   every rank computes its partial of each chunk c (produce(c, dst [M, P])) and sends it to rank
//   c directly: step s = 1 … tp−1 sends the chunk for rank r+s and receives rank r−s's partial of
//   chunk r, in one batch; rank r then sums the tp partials of its chunk in rank order, in fp32,
//   rounding once (ops::sum_partials), adding b and the residual there (once, not tp times).
//   plain (g.overlap() false): every produce first, then all tp−1 exchanges as one batch that
//     compute waits for, then the sum, then overlap();
//   overlapped: produce(r+s) then step s at once on the TP communication stream, so step s moves
//     while produce(r+s+1) computes; this rank's own partial last, then overlap() (e.g. the weight
//     gradient GEMM) while the last steps finish; then compute waits and sums.
// Both paths run the same produce calls on the same memory in the same order and the same sum, so
// the results are bit-identical (and, unlike a ring that accumulates as it goes, the summation
// order does not depend on the chunk). Why direct sends rather than a relay ring: the same bytes
// leave each rank ((tp−1)·M·P), every link of an NVSwitch node is as fast as a neighbour's, and
// one fp32 sum rounds once where a bf16 ring rounds at each hop.
// Workspace: (2·tp − 1)·M·P elements of out's dtype for the call's duration.
#pragma once
#include <functional>

#include "parallel/tensor/group.h"

namespace tetra::tp {

// produce(c, dst): writes this rank's partial of chunk c into dst [M, P] (on the compute stream).
using ChunkProducer = std::function<void(int chunk, Tensor& dst)>;

// out [M, P] = Σ_q partial_q[chunk r] + b + residual (b [P] and residual [M, P] may be undefined /
// null; out may be the residual itself). overlap (may be empty) runs on the compute stream after
// the last produce: in the overlapped path while the last exchanges are in flight.
void produce_then_reduce_scatter(TpGroup& g, Tensor& out, const ChunkProducer& produce, const Tensor& b = Tensor(),
                                 const Tensor* residual = nullptr, const std::function<void()>& overlap = {},
                                 const char* what = "reduce_scatter");

// out [N, P] = Σ_q partial_q (+ b + residual [N, P]), the same on every rank: the reduce-scatter
// above into this rank's rows, then an all-gather of the reduced rows (one collective). overlap
// runs while the all-gather moves (overlapped) or after it (plain). out may be the residual.
void produce_then_all_reduce(TpGroup& g, Tensor& out, const ChunkProducer& produce, const Tensor& b = Tensor(),
                             const Tensor* residual = nullptr, const std::function<void()>& overlap = {},
                             const char* what = "all_reduce");

// out [M, P] = Σ_q in_q[chunk r] (+ residual [M, P]) for in [N, P]: the deterministic reduce-
// scatter alone (the same sum in rank order on every path).
void reduce_scatter_rows(TpGroup& g, Tensor& out, const Tensor& in, const Tensor* residual = nullptr);
// t [N, P] = Σ_q t_q in place, bit-identical on every rank.
void all_reduce_rows(TpGroup& g, Tensor& t);

}  // namespace tetra::tp
