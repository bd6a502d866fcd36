// The full (single-rank) tensors of a tensor-parallel test problem and the slices each rank of a
// group of tp holds, built identically on every rank from one seed: x [N, I], W [O, I], b [O],
// a residual [N, O], dy [N, O] and a GELU pre-activation [N, I], with N = tp·M. Shared by the CPU
// test under mpirun (tests/parallel/tensor/tp_primitives_test.cpp) and the GPU test (tests/parallel/tensor/tp_gpu_test.cpp).
#pragma once
#include <cstring>

#include "runtime/ops.h"
#include "tests/runtime/op_test_util.h"

namespace tetra::test {

// Columns [start, start + len) of a 2-D host tensor, as a new contiguous [rows, len] tensor.
inline Tensor columns(const Tensor& t, int64_t start, int64_t len) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  Tensor out = Tensor::empty({rows, len}, t.dtype());
  const size_t e = dtype_size(t.dtype());
  const char* src = static_cast<const char*>(t.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(dst + i * len * e, src + (i * cols + start) * e, static_cast<size_t>(len) * e);
  return out;
}

// Rows [start, start + len) as a new contiguous tensor.
inline Tensor rows(const Tensor& t, int64_t start, int64_t len) { return clone(t.narrow(start, len)); }

struct TpProblem {
  int tp = 1;
  int64_t m = 0, n = 0, in = 0, out = 0;  // M, N = tp·M, I, O (I and O divisible by tp)
  Tensor x, w, b, residual, dy, gelu_pre;

  TpProblem(int tp_, int64_t m_, int64_t in_, int64_t out_, uint64_t seed)
      : tp(tp_), m(m_), n(tp_ * m_), in(in_), out(out_) {
    Rng rng(seed);
    x = random_tensor(rng, {n, in});
    w = random_tensor(rng, {out, in}, 0.3);
    b = random_tensor(rng, {out}, 0.5);
    residual = random_tensor(rng, {n, out});
    dy = random_tensor(rng, {n, out});
    gelu_pre = random_tensor(rng, {n, in});
  }
  int64_t in_slice() const { return in / tp; }
  int64_t out_slice() const { return out / tp; }
  // Rank r's pieces.
  Tensor x_shard(int r) const { return rows(x, r * m, m); }                      // [M, I] sequence shard
  Tensor x_cols(int r) const { return columns(x, r * in_slice(), in_slice()); }  // [N, I/tp]
  Tensor w_rows(int r) const { return rows(w, r * out_slice(), out_slice()); }   // column-parallel [O/tp, I]
  Tensor w_cols(int r) const { return columns(w, r * in_slice(), in_slice()); }  // row-parallel [O, I/tp]
  Tensor b_rows(int r) const { return rows(b.view({out, 1}), r * out_slice(), out_slice()).view({out_slice()}); }
  Tensor dy_cols(int r) const { return columns(dy, r * out_slice(), out_slice()); }  // [N, O/tp]
  Tensor dy_shard(int r) const { return rows(dy, r * m, m); }                        // [M, O]
  Tensor residual_shard(int r) const { return rows(residual, r * m, m); }            // [M, O]
  Tensor gelu_pre_cols(int r) const { return columns(gelu_pre, r * in_slice(), in_slice()); }
};

}  // namespace tetra::test
