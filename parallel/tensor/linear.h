// The tensor-parallel linear layers' GEMMs with their collectives (Megatron-LM's column- and
// row-parallel linear, with and without sequence parallelism), for a tensor-parallel group of tp
// ranks (parallel/tensor/group.h) — the API the models' tensor-parallel layers call. Every function
// takes tensors on one device (CPU fp32 or CUDA bf16/fp32), preallocated by the caller, and
// writes its outputs; nothing is kept. Weights are [out, in] (nn.Linear), this rank's slice:
// a column-parallel weight is w[O/tp, I] (bias b[O/tp]), a row-parallel one w[O, I/tp] (bias b[O],
// replicated). N = tokens of the micro-batch, M = N/tp (rank r's sequence-parallel shard: rows
// [r·M, (r+1)·M)). tp must divide N. At tp = 1 each function is exactly the plain op
// (runtime/ops.h) with no communication and no workspace.
//
// Overlap (parallel.tp_comm_overlap, TpGroup::overlap()): the all-gathers and reduce-scatters are
// split into tp chunks exchanged around the group while the GEMMs of the chunks already there run
// (parallel/tensor/all_gather.h and tp_reduce_scatter.h say how). With overlap off the same chunked
// GEMMs run after (all-gather) or before (reduce-scatter) one non-overlapped exchange. The two
// paths give bit-identical results (same GEMMs on the same memory, same summation order); only
// where compute waits differs. The waits are measured per step as exposed TP communication
// (CommScheduler::exposed_ms(MeshAxis::TP)).
//
// Sequence parallelism (norms and residuals on the M-row shard), Megatron's naming:
//   column-parallel forward  y[N, O/tp] = act(all_gather_rows(x_shard[M, I]) · wᵀ + b)
//                            all_gather_linear_forward
//   row-parallel forward     y_shard[M, O] = reduce_scatter_rows(x[N, I/tp] · wᵀ) + b + residual
//                            linear_forward_reduce_scatter
//   column-parallel backward dx_shard[M, I] = reduce_scatter_rows(dy[N, O/tp] · w), overlapped with
//   (input)                  the caller's weight-gradient GEMM: linear_backward_input_reduce_scatter
//   row-parallel backward    dx[N, I/tp] = all_gather_rows(dy_shard[M, O]) · w  (⊙ gelu'(pre))
//   (input)                  all_gather_linear_backward_input, keeping the gathered dy for dW
//   weight gradients         local: ops::linear_backward_weight with the gathered x (column-
//                            parallel: dw = dyᵀ · x_gathered) or the gathered dy (row-parallel:
//                            dw = dy_gatheredᵀ · x; its replicated bias gradient Σ_N dy_gathered
//                            is then complete on every rank, no reduction needed).
// The gathered x of a column-parallel layer: all_gather_linear_forward can hand it back
// (x_gathered) to keep until the weight gradient — N·I elements per layer held from forward to
// W, no second gather — or the caller keeps only x_shard and gathers again in backward with
// PendingAllGather (parallel/tensor/all_gather.h), started before the input-gradient GEMMs so it moves
// under them (M·I kept, one more all-gather of (tp−1)·M·I elements per layer; Megatron's choice).
//
// Without sequence parallelism (activations replicated, [N, ·] on every rank), Megatron's f / g:
//   f (before a column-parallel layer): forward identity (ops::linear_forward on the replicated x);
//     backward dx[N, I] = all_reduce(dy[N, O/tp] · w): linear_backward_input_all_reduce
//   g (after a row-parallel layer): forward y[N, O] = all_reduce(x[N, I/tp] · wᵀ) + b + residual:
//     linear_forward_all_reduce; backward identity (ops::linear_backward_input on the replicated dy).
// The all-reduce is the deterministic reduce-scatter above plus an all-gather, so every rank holds
// the same bits and both paths agree bit for bit.
//
// The GEMMs themselves (LinearGemms, the last argument of each function, may be null): the working
// dtype's ops with w by default; a layer under an FP8 recipe gives its own (models/fp8_tensor_
// parallel.h), which the functions call on the same chunks in the same order, so the overlapped and
// plain paths stay bit-identical under FP8 too.
#pragma once
#include <functional>

#include "parallel/tensor/group.h"
#include "runtime/ops.h"

namespace tetra::tp {

// A tensor-parallel layer's GEMMs on R rows (one chunk, or all N): what the functions below run in
// place of the plain ops. An empty member means the plain op with the w passed to the function.
struct LinearGemms {
  // y[R, O'] = act(x[R, I'] · wᵀ + b) (b may be undefined; pre_act as in ops::linear_forward).
  std::function<void(Tensor& y, const Tensor& x, const Tensor& b, ops::Activation act, Tensor* pre_act)> forward;
  // dx[R, I'] = dy[R, O'] · w, times gelu'(gelu_pre) when gelu_pre is given.
  std::function<void(Tensor& dx, const Tensor& dy, const Tensor* gelu_pre)> backward_input;
  // all_gather_linear_forward only (may be undefined): this rank's input shard as it crosses the wire
  // in place of x_shard — already cast, [M, I] of any dtype (an FP8 recipe's codes: a byte an
  // element). forward then receives chunks of the gathered [N, I] of that dtype as its rows,
  // `gathered` (may be empty) the whole of it once every chunk is consumed, and x_gathered is left
  // unwritten (what the weight gradient reads is the layer's to keep).
  Tensor gather_shard;
  std::function<void(const Tensor& gathered)> gathered;
};

// y (= residual +) act(x · wᵀ + b) through `gemms` (null or empty: ops::linear_forward).
void gemm_forward(const LinearGemms* gemms, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
                  ops::Activation act = ops::Activation::None, Tensor* pre_act = nullptr,
                  const Tensor* residual = nullptr);
// dx = dy · w (⊙ gelu'(gelu_pre)) through `gemms` (null or empty: ops::linear_backward_input(_gelu)).
void gemm_backward_input(const LinearGemms* gemms, Tensor& dx, const Tensor& dy, const Tensor& w,
                         const Tensor* gelu_pre = nullptr);

// y[N, O/tp] = act(all_gather_rows(x_shard[M, I]) · w[O/tp, I]ᵀ + b[O/tp]); pre_act [N, O/tp] as in
// ops::linear_forward. x_gathered ([N, I], optional): receives the gathered input (kept by the
// caller for the weight gradient); without it a workspace of N·I elements is used and released.
// With gemms->gather_shard defined, that is gathered instead (into a workspace) and x_gathered is
// not written.
void all_gather_linear_forward(TpGroup& g, Tensor& y, const Tensor& x_shard, const Tensor& w, const Tensor& b,
                               ops::Activation act = ops::Activation::None, Tensor* pre_act = nullptr,
                               Tensor* x_gathered = nullptr, const LinearGemms* gemms = nullptr);

// y_shard[M, O] = reduce_scatter_rows(x[N, I/tp] · w[O, I/tp]ᵀ) + b[O] + residual_shard[M, O]
// (b undefined / residual null: left out). y_shard may be the residual itself.
void linear_forward_reduce_scatter(TpGroup& g, Tensor& y_shard, const Tensor& x, const Tensor& w, const Tensor& b,
                                   const Tensor* residual_shard = nullptr, const LinearGemms* gemms = nullptr);

// dx_shard[M, I] = reduce_scatter_rows(dy[N, O/tp] · w[O/tp, I]). overlap (optional) runs on the
// compute stream once the input-gradient GEMMs are issued — in the overlapped path while the last
// exchanges move (give it the weight-gradient GEMM), in the plain path after the reduce-scatter.
void linear_backward_input_reduce_scatter(TpGroup& g, Tensor& dx_shard, const Tensor& dy, const Tensor& w,
                                          const std::function<void()>& overlap = {},
                                          const LinearGemms* gemms = nullptr);

// dx[N, I/tp] = all_gather_rows(dy_shard[M, O]) · w[O, I/tp], times gelu'(gelu_pre[N, I/tp]) when
// gelu_pre is given (ops::linear_backward_input_gelu: the input of this layer was gelu(gelu_pre)).
// dy_gathered ([N, O], optional): receives the gathered dy for the weight gradient.
void all_gather_linear_backward_input(TpGroup& g, Tensor& dx, const Tensor& dy_shard, const Tensor& w,
                                      const Tensor* gelu_pre = nullptr, Tensor* dy_gathered = nullptr,
                                      const LinearGemms* gemms = nullptr);

// g: y[N, O] = all_reduce(x[N, I/tp] · w[O, I/tp]ᵀ) + b[O] + residual[N, O]; y may be the residual.
void linear_forward_all_reduce(TpGroup& g, Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
                               const Tensor* residual = nullptr, const LinearGemms* gemms = nullptr);

// f's backward: dx[N, I] = all_reduce(dy[N, O/tp] · w[O/tp, I]); overlap as for the reduce-scatter
// form (runs while the final all-gather moves, in the overlapped path).
void linear_backward_input_all_reduce(TpGroup& g, Tensor& dx, const Tensor& dy, const Tensor& w,
                                      const std::function<void()>& overlap = {}, const LinearGemms* gemms = nullptr);

}  // namespace tetra::tp
