// CPU dense layer through OpenBLAS: weights are [O, I] row-major (PyTorch's nn.Linear layout).
//   forward          y[N, O]  = act(x[N, I] · wᵀ + b)
//                    y[N, O]  = x · wᵀ + b + residual[N, O]   (act None; y may be the residual itself)
//   backward input   dx[N, I] (+)= dy[N, O] · w[O, I]
//   backward weight  dw[O, I] (+)= dyᵀ · x,   db[O] (+)= column sums of dy
// x, y, dx, dy may carry leading dimensions ([B, T, F] is read as [B·T, F]); the leading
// dimensions of y must then equal those of x.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

namespace {

void check_weight(const char* op, const char* what, const Tensor& w) {
  check_dtype(op, what, w, DType::F32);
  if (w.ndim() != 2) TETRA_FAIL(Internal, op, ": ", what, " must be 2-D [O, I], got ", w.describe());
}

// BLAS wants leading dimensions ≥ 1 even for empty matrices.
int ld(int64_t n) { return static_cast<int>(std::max<int64_t>(n, 1)); }

// The checks both input-gradient ops share (dx[N, I] from dy[N, O] and w[O, I]); returns N.
int64_t check_input_gradient(const char* op, const Tensor& dx, const Tensor& dy, const Tensor& w) {
  check_weight(op, "w", w);
  check_dtype(op, "dy", dy, DType::F32);
  check_last_dim(op, "dy", dy, w.dim(0));
  check_dtype(op, "dx", dx, DType::F32);
  check_shape(op, "dx", dx, with_last(leading_shape(dy), w.dim(1)));
  return rows_of(dy);
}

}  // namespace

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                    Tensor* pre_act, const Tensor* residual) {
  const char* op = "linear_forward";
  check_weight(op, "w", w);
  const int64_t O = w.dim(0), I = w.dim(1);
  check_dtype(op, "x", x, DType::F32);
  check_last_dim(op, "x", x, I);
  const int64_t N = rows_of(x);
  const Shape y_shape = with_last(leading_shape(x), O);
  check_dtype(op, "y", y, DType::F32);
  check_shape(op, "y", y, y_shape);
  if (b.defined()) {
    check_dtype(op, "b", b, DType::F32);
    check_shape(op, "b", b, {O});
  }
  const bool keep_pre = given(pre_act);
  if (keep_pre) {
    check_dtype(op, "pre_act", *pre_act, DType::F32);
    check_shape(op, "pre_act", *pre_act, y_shape);
  }
  const bool with_res = given(residual);
  if (with_res) {
    if (act != Activation::None)
      TETRA_FAIL(Internal, op, ": a residual can only be added with Activation::None (y = x·wᵀ + b + residual)");
    if (keep_pre) TETRA_FAIL(Internal, op, ": a residual cannot be combined with pre_act");
    check_dtype(op, "residual", *residual, DType::F32);
    check_shape(op, "residual", *residual, y_shape);
    check_same_or_disjoint(op, "residual", y, *residual);
  }
  if (N == 0 || O == 0) return;

  // z = x·wᵀ + b (+ residual) goes to pre_act when it is kept, else straight into y: z starts as
  // residual (+ b) or b, and the GEMM adds to it (beta = 1).
  Tensor& z = keep_pre ? *pre_act : y;
  float* pz = z.data<float>();
  float beta = 0.0f;
  if (with_res) {
    const float* pr = residual->data<float>();
    if (pr != pz) std::copy_n(pr, N * O, pz);  // in place: z is the residual already
    beta = 1.0f;
  }
  if (b.defined()) {
    const float* pb = b.data<float>();
    for (int64_t n = 0; n < N; ++n) {
      float* row = pz + n * O;
      if (with_res) {
        for (int64_t o = 0; o < O; ++o) row[o] += pb[o];
      } else {
        std::copy_n(pb, O, row);
      }
    }
    beta = 1.0f;
  }
  if (I > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), static_cast<int>(O),
                static_cast<int>(I), 1.0f, x.data<float>(), ld(I), w.data<float>(), ld(I), beta, pz, ld(O));
  } else if (beta == 0.0f) {
    std::fill_n(pz, N * O, 0.0f);  // an empty sum
  }

  if (act == Activation::Gelu) {
    gelu_forward(y, z, nullptr);  // elementwise: z may be y itself
  } else if (keep_pre) {
    std::copy_n(pz, N * O, y.data<float>());
  }
}

void linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, bool accumulate) {
  const char* op = "linear_backward_input";
  const int64_t N = check_input_gradient(op, dx, dy, w);
  const int64_t O = w.dim(0), I = w.dim(1);
  if (N == 0 || I == 0) return;
  if (O == 0) {
    if (!accumulate) std::fill_n(dx.data<float>(), N * I, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(N), static_cast<int>(I),
              static_cast<int>(O), 1.0f, dy.data<float>(), ld(O), w.data<float>(), ld(I),
              accumulate ? 1.0f : 0.0f, dx.data<float>(), ld(I));
}

void linear_backward_input_gelu(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& gelu_pre) {
  const char* op = "linear_backward_input_gelu";
  check_input_gradient(op, dx, dy, w);
  check_dtype(op, "gelu_pre", gelu_pre, DType::F32);
  check_shape(op, "gelu_pre", gelu_pre, dx.shape());
  check_disjoint(op, "gelu_pre", dx, gelu_pre);
  linear_backward_input(dx, dy, w, /*accumulate=*/false);
  gelu_backward(dx, dx, gelu_pre, nullptr);
}

void linear_backward_weight(Tensor& dw, Tensor* db, const Tensor& dy, const Tensor& x, bool accumulate,
                            const Tensor* dy_column_sum) {
  const char* op = "linear_backward_weight";
  check_weight(op, "dw", dw);
  const int64_t O = dw.dim(0), I = dw.dim(1);
  check_dtype(op, "dy", dy, DType::F32);
  check_last_dim(op, "dy", dy, O);
  check_dtype(op, "x", x, DType::F32);
  check_shape(op, "x", x, with_last(leading_shape(dy), I));
  const int64_t N = rows_of(dy);
  const bool with_bias = given(db);
  if (with_bias) {
    check_dtype(op, "db", *db, DType::F32);
    check_shape(op, "db", *db, {O});
  }
  const bool with_sum = given(dy_column_sum);
  if (with_sum) {
    if (!with_bias) TETRA_FAIL(Internal, op, ": dy_column_sum is given but there is no db to take it");
    check_dtype(op, "dy_column_sum", *dy_column_sum, DType::F32);
    check_shape(op, "dy_column_sum", *dy_column_sum, {O});
  }
  if (O == 0) return;

  float* pdw = dw.data<float>();
  if (I > 0) {
    if (N > 0) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(O), static_cast<int>(I),
                  static_cast<int>(N), 1.0f, dy.data<float>(), ld(O), x.data<float>(), ld(I),
                  accumulate ? 1.0f : 0.0f, pdw, ld(I));
    } else if (!accumulate) {
      std::fill_n(pdw, O * I, 0.0f);
    }
  }
  if (with_sum) {
    float* pdb = db->data<float>();
    const float* ps = dy_column_sum->data<float>();
    for (int64_t o = 0; o < O; ++o) pdb[o] = accumulate ? pdb[o] + ps[o] : ps[o];
  } else if (with_bias) {
    // Column sums of dy in double (N may be large), added to db or replacing it.
    float* pdb = db->data<float>();
    const float* pdy = dy.data<float>();
    std::vector<double> sums(static_cast<size_t>(O), 0.0);
    for (int64_t n = 0; n < N; ++n) {
      const float* row = pdy + n * O;
      for (int64_t o = 0; o < O; ++o) sums[o] += row[o];
    }
    for (int64_t o = 0; o < O; ++o)
      pdb[o] = accumulate ? static_cast<float>(pdb[o] + sums[o]) : static_cast<float>(sums[o]);
  }
}

}  // namespace tetra::cpu
