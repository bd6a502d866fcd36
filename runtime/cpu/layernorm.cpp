// CPU LayerNorm over the last dimension, as torch.nn.functional.layer_norm computes it:
//   mean = Σx/C,  var = Σ(x - mean)²/C (biased),  rstd = 1/√(var + eps)
//   x̂ = (x - mean)·rstd,  y = x̂·w + b
// Backward, with g = dy·w:  dx = rstd·(g - mean(g) - x̂·mean(g·x̂)),  dw += Σ_rows dy·x̂,  db += Σ_rows dy.
// Shapes: x, y, dx, dy [..., C]; mean, rstd the leading dimensions (x [N, C] → [N]); w, b [C].
// Row statistics are summed in double. dx may alias dy (a row of dy is fully read before dx is written).
// With dresidual: dx = dresidual + (the formula above); dx may alias dresidual (element c of it is read
// just before dx[c] is written).
// Dtypes: x, w, b, dx, dresidual, dw, db, statistics fp32; y and dy fp32 or bf16 (an fp32 residual
// stream normalised into bf16 activations, runtime/ops.h); dx_rounded bf16 (dx rounded, dy's dtype).
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps, Tensor* amax) {
  const char* op = "layernorm_forward";
  check_dtype(op, "w", w, DType::F32);
  if (w.ndim() != 1) TETRA_FAIL(Internal, op, ": w must be 1-D [C], got ", w.describe());
  const int64_t C = w.dim(0);
  check_dtype(op, "x", x, DType::F32);
  check_last_dim(op, "x", x, C);
  if (b.defined()) {
    check_dtype(op, "b", b, DType::F32);
    check_shape(op, "b", b, {C});
  }
  check_norm_output(op, "y", y, x);
  check_dtype(op, "mean", mean, DType::F32);
  check_shape(op, "mean", mean, leading_shape(x));
  check_dtype(op, "rstd", rstd, DType::F32);
  check_shape(op, "rstd", rstd, leading_shape(x));
  if (!(eps >= 0.0f)) TETRA_FAIL(Internal, op, ": eps must be ≥ 0, got ", eps);
  if (C == 0) TETRA_FAIL(Internal, op, ": cannot normalise rows of 0 channels (x is ", x.describe(), ")");

  const int64_t N = rows_of(x);
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  const float* pb = b.defined() ? b.data<float>() : nullptr;
  const FloatWriter py(y);
  float* pmean = mean.data<float>();
  float* prstd = rstd.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = px + n * C;
    double s = 0.0;
    for (int64_t c = 0; c < C; ++c) s += xr[c];
    const double mu = s / static_cast<double>(C);
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double d = xr[c] - mu;
      ss += d * d;
    }
    const double var = ss / static_cast<double>(C);
    const float r = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    const float m = static_cast<float>(mu);
    for (int64_t c = 0; c < C; ++c) {  // y may alias x: x[c] is read just before y[c] is written
      const float xhat = (xr[c] - m) * r;
      py.set(n * C + c, xhat * pw[c] + (pb ? pb[c] : 0.0f));
    }
    pmean[n] = m;
    prstd[n] = r;
  }
  if (amax) fp8_amax(*amax, y);  // ops.h's amax output: the cast's own measure of y as stored
}

void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd, bool accumulate_dx, const Tensor* dresidual,
                        Tensor* dx_column_sum, Tensor* dx_rounded, Tensor* dx_amax) {
  const char* op = "layernorm_backward";
  check_dtype(op, "w", w, DType::F32);
  if (w.ndim() != 1) TETRA_FAIL(Internal, op, ": w must be 1-D [C], got ", w.describe());
  const int64_t C = w.dim(0);
  check_dtype(op, "x", x, DType::F32);
  check_last_dim(op, "x", x, C);
  check_norm_gradients(op, dx, dw, dy, x, C);
  const bool with_rounded = check_rounded_copy(op, dx_rounded, dx, dy);
  const bool with_db = db.defined();  // a LayerNorm without bias passes an undefined db
  if (with_db) {
    check_dtype(op, "db", db, DType::F32);
    check_shape(op, "db", db, {C});
  }
  check_dtype(op, "mean", mean, DType::F32);
  check_shape(op, "mean", mean, leading_shape(x));
  check_dtype(op, "rstd", rstd, DType::F32);
  check_shape(op, "rstd", rstd, leading_shape(x));
  const bool with_res = check_dresidual(op, "LayerNorm", dresidual, x, accumulate_dx);
  const bool with_sum = given(dx_column_sum);
  if (with_sum) {
    check_dtype(op, "dx_column_sum", *dx_column_sum, DType::F32);
    check_shape(op, "dx_column_sum", *dx_column_sum, {C});
  }

  const int64_t N = rows_of(x);
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  const FloatReader pdy(dy);
  const FloatWriter prounded(with_rounded ? *dx_rounded : dx);
  const float* pres = with_res ? dresidual->data<float>() : nullptr;
  const float* pmean = mean.data<float>();
  const float* prstd = rstd.data<float>();
  float* pdx = dx.data<float>();
  std::vector<double> dw_sum(static_cast<size_t>(C), 0.0), db_sum(static_cast<size_t>(C), 0.0);
  std::vector<double> dx_sum(with_sum ? static_cast<size_t>(C) : 0, 0.0);
  std::vector<float> dyr(static_cast<size_t>(C));
  const double inv_c = 1.0 / static_cast<double>(C);
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = px + n * C;
    // dy's row as fp32: read once before dx (which may alias it) is written.
    for (int64_t c = 0; c < C; ++c) dyr[c] = pdy[n * C + c];
    const float m = pmean[n], r = prstd[n];
    // Pass 1: the two row means of the formula, and the weight gradients.
    double g_sum = 0.0, gx_sum = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = static_cast<double>((xr[c] - m) * r);
      const double g = static_cast<double>(dyr[c]) * pw[c];
      g_sum += g;
      gx_sum += g * xhat;
      dw_sum[c] += dyr[c] * xhat;
      db_sum[c] += dyr[c];
    }
    const double g_mean = g_sum * inv_c, gx_mean = gx_sum * inv_c;
    // Pass 2: dx.
    float* dxr = pdx + n * C;
    const float* resr = with_res ? pres + n * C : nullptr;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = static_cast<double>((xr[c] - m) * r);
      const double g = static_cast<double>(dyr[c]) * pw[c];
      const float v = static_cast<float>(r * (g - g_mean - xhat * gx_mean));
      dxr[c] = with_res ? resr[c] + v : (accumulate_dx ? dxr[c] + v : v);
      if (with_sum) dx_sum[c] += dxr[c];
      if (with_rounded) prounded.set(n * C + c, dxr[c]);
    }
  }
  float* pdw = dw.data<float>();
  for (int64_t c = 0; c < C; ++c) pdw[c] = static_cast<float>(pdw[c] + dw_sum[c]);
  if (with_db) {
    float* pdb = db.data<float>();
    for (int64_t c = 0; c < C; ++c) pdb[c] = static_cast<float>(pdb[c] + db_sum[c]);
  }
  if (with_sum) {
    float* ps = dx_column_sum->data<float>();
    for (int64_t c = 0; c < C; ++c) ps[c] = static_cast<float>(dx_sum[c]);
  }
  // ops.h's dx_amax: the cast's own measure of the copy the projections' GEMMs read.
  if (dx_amax) fp8_amax(*dx_amax, with_rounded ? *dx_rounded : dx);
}

}  // namespace tetra::cpu
