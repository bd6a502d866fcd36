// TensorParallel: what the tensor-parallel layers of a model need from their tp group
// (ARCHITECTURE.md §3; docs/tensor_parallel.md): the group's size and rank, whether activations
// between layers are sequence-sharded (parallel.sequence_parallel), and the collective + GEMM steps
// of Megatron's column- and row-parallel linear layers. Layers hold a pointer to it (null at tp = 1,
// where they run the plain ops and nothing here is called) and reach tensor-parallel communication
// only through it, so how those steps communicate — one collective, or chunks pipelined with the
// GEMM (parallel.tp_comm_overlap) — is decided in this one place.
//
// Layout: activations are [N, C] with N = B·T tokens. With sequence parallelism rank r holds the
// rows [r·M, (r+1)·M), M = N/tp (norms, residuals, dropout-free elementwise work run there); without
// it every rank holds all N rows (replicated). Weights are [out, in], this rank's slice: a
// column-parallel w [O/tp, I] (bias [O/tp]), a row-parallel w [O, I/tp] (bias [O], replicated).
//
//   column-parallel forward    y[N, O/tp] = act(x_full · wᵀ + b),  x_full = all_gather(x [M, I]) (SP)
//                              or x [N, I] itself
//   column-parallel backward   dx = dy[N, O/tp] · w, reduce-scattered to [M, I] (SP) or all-reduced
//   row-parallel forward       y = Σ_tp x[N, I/tp] · wᵀ + b + residual, reduce-scattered to [M, O]
//                              (SP) or all-reduced to [N, O]
//   row-parallel backward      dx[N, I/tp] = dy_full · w (⊙ gelu'(pre)), dy_full = all_gather(dy
//                              [M, O]) (SP) or dy [N, O] itself
// The weight gradients need no communication: dw of a column-parallel layer is dyᵀ · x_full, of a
// row-parallel one dy_fullᵀ · x; the caller keeps x_full / dy_full for them.
//
// The steps are the communication primitives of parallel/tensor/linear.h on this group's TpGroup
// (parallel/tensor/group.h): every collective on the TP communication stream of the CommScheduler,
// which records it under MeshAxis::TP with how long compute waited for it (exposed_comm_ms_tp).
// parallel.tp_comm_overlap selects their overlapped path (the exchanges split into tp chunks that
// move while the GEMMs of the chunks already there run) or the plain one; both give the same bits.
// Without sequence parallelism the all-reduce forms need tp to divide N; where it does not, they
// run the plain GEMM and one all-reduce (not overlapped).
#pragma once
#include <functional>
#include <string>

#include "parallel/comm_scheduler.h"
#include "parallel/tensor/group.h"
#include "parallel/tensor/linear.h"
#include "runtime/communicator.h"
#include "runtime/ops.h"

namespace tetra {

class TensorParallel {
 public:
  // `comm`: the tensor-parallel group for tensors on the compute device (Mesh::device_comm(
  // MeshAxis::TP)); `scheduler`: the device's CommScheduler. Both outlive this object.
  TensorParallel(Communicator& comm, CommScheduler& scheduler, bool sequence_parallel, bool overlap);

  int size() const { return group_.size(); }
  int rank() const { return group_.rank(); }
  bool sequence_parallel() const { return sequence_parallel_; }
  bool overlap() const { return group_.overlap(); }
  Communicator& comm() const { return group_.comm(); }
  TpGroup& group() { return group_; }

  // Rows of this rank's activations for a micro-batch of n tokens: n / size() with sequence
  // parallelism (fails, naming `what`, unless size() divides n), else n.
  int64_t local_rows(int64_t n, const char* what) const;
  // The vocabulary shard of a table of `vocab` rows split over the group: rows [rank·V/tp, ...).
  ops::VocabShard vocab_shard(int64_t vocab) const;

  // ---- collectives over the group (compute waits for their result) ----
  // full [size()·M, C] = the rows [M, C] of every rank, in rank order.
  void all_gather_rows(Tensor& full, const Tensor& rows, const char* what);
  // rows [M, C] = Σ_ranks full[this rank's M rows], full [size()·M, C].
  void reduce_scatter_rows(Tensor& rows, const Tensor& full, const char* what);
  // t = Σ_ranks t, the same on every rank.
  void all_reduce(Tensor& t, const char* what);
  // t = max over the ranks of t, element by element (e.g. an FP8 cast's amax bits, u32).
  void all_reduce_max(Tensor& t, const char* what);
  // out [size(), ...] = in of every rank, in rank order (out holds size()·in.numel() elements).
  void all_gather(Tensor& out, const Tensor& in, const char* what);

  // ---- the GEMM + collective steps of the tensor-parallel linear layers (see above) ----
  // `gemms` (may be null): the layer's own GEMMs (an FP8 recipe's, models/fp8_tensor_parallel.h) in
  // place of the plain ops with w (tp::LinearGemms).
  // y [N, O/tp]; x [local_rows, I]; x_full [N, I] receives the gathered input under sequence
  // parallelism (allocated by the caller; ignored without it, where x is already whole; may be
  // undefined where gemms->gather_shard is defined, which is gathered instead).
  void column_forward(Tensor& y, const Tensor& x, Tensor* x_full, const Tensor& w, const Tensor& b,
                      ops::Activation act = ops::Activation::None, Tensor* pre_act = nullptr,
                      const tp::LinearGemms* gemms = nullptr);
  // dx [local_rows, I] from dy [N, O/tp]. `overlap` (may be empty) is work that does not read dx
  // (the layer's weight gradient): run while the reduction moves where that is possible, else after.
  void column_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, const std::function<void()>& overlap = {},
                             const tp::LinearGemms* gemms = nullptr);
  // y [local_rows, O] from x [N, I/tp]; b [O] and residual [local_rows, O] may be undefined / null;
  // y may be the residual itself.
  void row_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor* residual,
                   const tp::LinearGemms* gemms = nullptr);
  // dx [N, I/tp] from dy [local_rows, O], times gelu'(gelu_pre [N, I/tp]) when given; dy_full
  // [N, O] receives the gathered dy under sequence parallelism (ignored without it).
  void row_backward_input(Tensor& dx, const Tensor& dy, Tensor* dy_full, const Tensor& w,
                          const Tensor* gelu_pre = nullptr, const tp::LinearGemms* gemms = nullptr);

 private:
  void run(const std::string& what, int64_t bytes, const std::function<std::unique_ptr<Work>()>& launch);
  // Without sequence parallelism: whether the all-reduce forms can run chunked (tp divides n rows).
  bool chunked(int64_t n) const { return n % size() == 0; }
  TpGroup group_;
  bool sequence_parallel_;
};

}  // namespace tetra
