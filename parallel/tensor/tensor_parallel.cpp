#include "parallel/tensor/tensor_parallel.h"

#include "parallel/tensor/all_gather.h"
#include "parallel/tensor/linear.h"
#include "parallel/tensor/reduce_scatter.h"

namespace tetra {

TensorParallel::TensorParallel(Communicator& comm, CommScheduler& scheduler, bool sequence_parallel, bool overlap)
    : group_(comm, scheduler, overlap), sequence_parallel_(sequence_parallel) {}

int64_t TensorParallel::local_rows(int64_t n, const char* what) const {
  if (!sequence_parallel_) return n;
  if (n % size() != 0)
    TETRA_FAIL(Config, what, ": ", n, " tokens of a micro-batch do not split over the ", size(),
               " ranks of the tensor-parallel group (sequence parallelism shards them); make train.micro_batch · "
               "train.seq_len a multiple of parallel.tp, or set parallel.sequence_parallel: false");
  return n / size();
}

ops::VocabShard TensorParallel::vocab_shard(int64_t vocab) const {
  TETRA_CHECK(vocab % size() == 0, "vocab_shard: a vocabulary of ", vocab, " does not split over tp = ", size());
  return {rank() * (vocab / size()), vocab};
}

void TensorParallel::run(const std::string& what, int64_t bytes, const std::function<std::unique_ptr<Work>()>& launch) {
  CommScheduler::Ticket t = group_.issue(what, bytes, launch);
  group_.wait(t);
}

void TensorParallel::all_gather_rows(Tensor& full, const Tensor& rows, const char* what) {
  TETRA_CHECK(full.numel() == rows.numel() * size() && full.dtype() == rows.dtype(), "tp all_gather_rows (", what,
              "): ", rows.describe(), " into ", full.describe());
  if (size() == 1) return ops::copy(full, rows);
  if (full.ndim() == 2 && rows.ndim() == 2) return tp::all_gather_then(group_, full, rows, {}, what);
  run(std::string("all_gather ") + what, static_cast<int64_t>(rows.nbytes()),
      [&] { return comm().all_gather(full, rows); });
}

void TensorParallel::reduce_scatter_rows(Tensor& rows, const Tensor& full, const char* what) {
  TETRA_CHECK(full.numel() == rows.numel() * size() && full.dtype() == rows.dtype(), "tp reduce_scatter_rows (",
              what, "): ", full.describe(), " into ", rows.describe());
  if (size() == 1) return ops::copy(rows, full);
  if (full.ndim() == 2 && rows.ndim() == 2) return tp::reduce_scatter_rows(group_, rows, full);
  run(std::string("reduce_scatter ") + what, static_cast<int64_t>(full.nbytes()),
      [&] { return comm().reduce_scatter(rows, full, ReduceOp::Sum); });
}

void TensorParallel::all_reduce(Tensor& t, const char* what) {
  if (size() == 1) return;
  if (t.ndim() == 2 && chunked(t.dim(0))) return tp::all_reduce_rows(group_, t);
  run(std::string("all_reduce ") + what, static_cast<int64_t>(t.nbytes()),
      [&] { return comm().all_reduce(t, ReduceOp::Sum); });
}

void TensorParallel::all_reduce_max(Tensor& t, const char* what) {
  if (size() == 1) return;
  run(std::string("all_reduce_max ") + what, static_cast<int64_t>(t.nbytes()),
      [&] { return comm().all_reduce(t, ReduceOp::Max); });
}

void TensorParallel::all_gather(Tensor& out, const Tensor& in, const char* what) {
  TETRA_CHECK(out.numel() == in.numel() * size() && out.dtype() == in.dtype(), "tp all_gather (", what, "): ",
              in.describe(), " into ", out.describe());
  if (size() == 1) return ops::copy(out, in);
  run(std::string("all_gather ") + what, static_cast<int64_t>(in.nbytes()), [&] { return comm().all_gather(out, in); });
}

void TensorParallel::column_forward(Tensor& y, const Tensor& x, Tensor* x_full, const Tensor& w, const Tensor& b,
                                    ops::Activation act, Tensor* pre_act, const tp::LinearGemms* gemms) {
  // Without sequence parallelism Megatron's f is the identity in forward.
  if (!sequence_parallel_) return tp::gemm_forward(gemms, y, x, w, b, act, pre_act);
  TETRA_CHECK(x_full && (x_full->defined() || (gemms && gemms->gather_shard.defined())),
              "column_forward: sequence parallelism needs the gathered input buffer");
  tp::all_gather_linear_forward(group_, y, x, w, b, act, pre_act, x_full, gemms);
}

void TensorParallel::column_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w,
                                           const std::function<void()>& overlap, const tp::LinearGemms* gemms) {
  if (sequence_parallel_) return tp::linear_backward_input_reduce_scatter(group_, dx, dy, w, overlap, gemms);
  if (chunked(dy.dim(0))) return tp::linear_backward_input_all_reduce(group_, dx, dy, w, overlap, gemms);
  tp::gemm_backward_input(gemms, dx, dy, w);
  all_reduce(dx, "column-parallel input gradient");
  if (overlap) overlap();
}

void TensorParallel::row_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor* residual,
                                 const tp::LinearGemms* gemms) {
  if (sequence_parallel_) return tp::linear_forward_reduce_scatter(group_, y, x, w, b, residual, gemms);
  if (chunked(x.dim(0))) return tp::linear_forward_all_reduce(group_, y, x, w, b, residual, gemms);
  // tp does not divide the rows: each rank's partial product (rank 0's carries the bias, so the sum
  // adds it once), one all-reduce, then the residual.
  Tensor partial =
      residual && residual->data_ptr() == y.data_ptr() ? Tensor::empty({x.dim(0), w.dim(0)}, y.dtype(), y.device()) : y;
  tp::gemm_forward(gemms, partial, x, w, rank() == 0 ? b : Tensor());
  all_reduce(partial, "row-parallel output");
  if (residual)
    ops::add(y, partial, *residual);
  else if (partial.data_ptr() != y.data_ptr())
    ops::copy(y, partial);
}

void TensorParallel::row_backward_input(Tensor& dx, const Tensor& dy, Tensor* dy_full, const Tensor& w,
                                        const Tensor* gelu_pre, const tp::LinearGemms* gemms) {
  if (sequence_parallel_) {
    TETRA_CHECK(dy_full && dy_full->defined(), "row_backward_input: sequence parallelism needs the gathered dy buffer");
    return tp::all_gather_linear_backward_input(group_, dx, dy, w, gelu_pre, dy_full, gemms);
  }
  // Without sequence parallelism g's backward is the identity.
  tp::gemm_backward_input(gemms, dx, dy, w, gelu_pre);
}

}  // namespace tetra
