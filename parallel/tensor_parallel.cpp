#include "parallel/tensor_parallel.h"

namespace tetra {

TensorParallel::TensorParallel(Communicator& comm, CommScheduler& scheduler, bool sequence_parallel, bool overlap)
    : comm_(comm), scheduler_(scheduler), sequence_parallel_(sequence_parallel), overlap_(overlap) {}

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
  CommScheduler::Ticket t = scheduler_.issue("tp " + what, bytes, launch);
  scheduler_.wait(t);
}

void TensorParallel::all_gather_rows(Tensor& full, const Tensor& rows, const char* what) {
  TETRA_CHECK(full.numel() == rows.numel() * size() && full.dtype() == rows.dtype(), "tp all_gather_rows (", what,
              "): ", rows.describe(), " into ", full.describe());
  if (size() == 1) return ops::copy(full, rows);
  run(std::string("all_gather ") + what, static_cast<int64_t>(rows.nbytes()), [&] { return comm_.all_gather(full, rows); });
}

void TensorParallel::reduce_scatter_rows(Tensor& rows, const Tensor& full, const char* what) {
  TETRA_CHECK(full.numel() == rows.numel() * size() && full.dtype() == rows.dtype(), "tp reduce_scatter_rows (",
              what, "): ", full.describe(), " into ", rows.describe());
  if (size() == 1) return ops::copy(rows, full);
  run(std::string("reduce_scatter ") + what, static_cast<int64_t>(full.nbytes()),
      [&] { return comm_.reduce_scatter(rows, full, ReduceOp::Sum); });
}

void TensorParallel::all_reduce(Tensor& t, const char* what) {
  if (size() == 1) return;
  run(std::string("all_reduce ") + what, static_cast<int64_t>(t.nbytes()),
      [&] { return comm_.all_reduce(t, ReduceOp::Sum); });
}

void TensorParallel::all_gather(Tensor& out, const Tensor& in, const char* what) {
  TETRA_CHECK(out.numel() == in.numel() * size() && out.dtype() == in.dtype(), "tp all_gather (", what, "): ",
              in.describe(), " into ", out.describe());
  if (size() == 1) return ops::copy(out, in);
  run(std::string("all_gather ") + what, static_cast<int64_t>(in.nbytes()), [&] { return comm_.all_gather(out, in); });
}

void TensorParallel::column_forward(Tensor& y, const Tensor& x, Tensor* x_full, const Tensor& w, const Tensor& b,
                                    ops::Activation act, Tensor* pre_act) {
  if (!sequence_parallel_) return ops::linear_forward(y, x, w, b, act, pre_act);
  TETRA_CHECK(x_full && x_full->defined(), "column_forward: sequence parallelism needs the gathered input buffer");
  all_gather_rows(*x_full, x, "column-parallel input");
  ops::linear_forward(y, *x_full, w, b, act, pre_act);
}

void TensorParallel::column_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w,
                                           const std::function<void()>& overlap) {
  // Each rank's partial of the whole input gradient: dy over its output features times its rows of w.
  Tensor partial = sequence_parallel_ ? Tensor::empty({dy.dim(0), w.dim(1)}, dx.dtype(), dx.device()) : dx;
  ops::linear_backward_input(partial, dy, w);
  if (sequence_parallel_)
    reduce_scatter_rows(dx, partial, "column-parallel input gradient");
  else
    all_reduce(dx, "column-parallel input gradient");
  if (overlap) overlap();
}

void TensorParallel::row_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor* residual) {
  // Each rank's partial product over its input features; rank 0's carries the bias, so the sum over
  // the group adds it exactly once.
  Tensor partial = sequence_parallel_ || (residual && residual->data_ptr() == y.data_ptr())
                       ? Tensor::empty({x.dim(0), w.dim(0)}, y.dtype(), y.device())
                       : y;
  ops::linear_forward(partial, x, w, rank() == 0 ? b : Tensor());
  if (sequence_parallel_) {
    if (residual) {
      Tensor reduced = Tensor::empty(y.shape(), y.dtype(), y.device());
      reduce_scatter_rows(reduced, partial, "row-parallel output");
      ops::add(y, reduced, *residual);
    } else {
      reduce_scatter_rows(y, partial, "row-parallel output");
    }
    return;
  }
  all_reduce(partial, "row-parallel output");
  if (residual)
    ops::add(y, partial, *residual);
  else if (partial.data_ptr() != y.data_ptr())
    ops::copy(y, partial);
}

void TensorParallel::row_backward_input(Tensor& dx, const Tensor& dy, Tensor* dy_full, const Tensor& w,
                                        const Tensor* gelu_pre) {
  const Tensor* full = &dy;
  if (sequence_parallel_) {
    TETRA_CHECK(dy_full && dy_full->defined(), "row_backward_input: sequence parallelism needs the gathered dy buffer");
    all_gather_rows(*dy_full, dy, "row-parallel output gradient");
    full = dy_full;
  }
  if (gelu_pre)
    ops::linear_backward_input_gelu(dx, *full, w, *gelu_pre);
  else
    ops::linear_backward_input(dx, *full, w);
}

}  // namespace tetra
