// CPU RMSNorm over the last dimension, as Hugging Face's LlamaRMSNorm computes it:
//   rstd = 1/√(Σx²/C + eps),  x̂ = x·rstd,  y = x̂·w
// Backward, with g = dy·w:  dx = rstd·(g − x̂·mean(g·x̂)),  dw += Σ_rows dy·x̂.
// (LayerNorm's backward without the mean terms: runtime/cpu/layernorm.cpp.)
// Shapes: x, y, dx, dy, dresidual [..., C]; rstd the leading dimensions (x [N, C] → [N]); w, dw [C].
// Row sums in double. y may alias x, dx may alias dy or dresidual (a row of dy is fully read before dx
// is written; element c of dresidual is read just before dx[c] is written).
// Dtypes: x, w, dx, dresidual, dw, rstd fp32; y and dy fp32 or bf16 (an fp32 residual stream
// normalised into bf16 activations, runtime/ops.h); dx_rounded bf16 (dx rounded, dy's dtype).
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

namespace {

// w [C] fp32; returns C.
int64_t check_weight(const char* op, const Tensor& w) {
  check_dtype(op, "w", w, DType::F32);
  if (w.ndim() != 1) TETRA_FAIL(Internal, op, ": w must be 1-D [C], got ", w.describe());
  if (w.dim(0) == 0) TETRA_FAIL(Internal, op, ": cannot normalise rows of 0 channels (w is ", w.describe(), ")");
  return w.dim(0);
}

}  // namespace

void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps, Tensor* amax,
                     Tensor* row_amax) {
  const char* op = "rmsnorm_forward";
  const int64_t C = check_weight(op, w);
  check_dtype(op, "x", x, DType::F32);
  check_last_dim(op, "x", x, C);
  check_norm_output(op, "y", y, x);
  check_dtype(op, "rstd", rstd, DType::F32);
  check_shape(op, "rstd", rstd, leading_shape(x));
  if (!(eps >= 0.0f)) TETRA_FAIL(Internal, op, ": eps must be ≥ 0, got ", eps);

  const int64_t N = rows_of(x);
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  const FloatWriter py(y);
  float* prstd = rstd.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = px + n * C;
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(C) + static_cast<double>(eps)));
    // y may alias x: x[c] is read just before y[c] is written.
    for (int64_t c = 0; c < C; ++c) py.set(n * C + c, xr[c] * r * pw[c]);
    prstd[n] = r;
  }
  if (amax) fp8_amax(*amax, y);  // ops.h's amax output: the cast's own measure of y as stored
  if (row_amax) fp8_row_amax(*row_amax, y);
}

void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      bool accumulate_dx, const Tensor* dresidual, Tensor* dx_rounded, Tensor* dx_amax,
                      Tensor* dx_row_amax) {
  const char* op = "rmsnorm_backward";
  const int64_t C = check_weight(op, w);
  check_dtype(op, "x", x, DType::F32);
  check_last_dim(op, "x", x, C);
  check_norm_gradients(op, dx, dw, dy, x, C);
  const bool with_rounded = check_rounded_copy(op, dx_rounded, dx, dy);
  check_dtype(op, "rstd", rstd, DType::F32);
  check_shape(op, "rstd", rstd, leading_shape(x));
  const bool with_res = check_dresidual(op, "RMSNorm", dresidual, x, accumulate_dx);

  const int64_t N = rows_of(x);
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  const FloatReader pdy(dy);
  const FloatWriter prounded(with_rounded ? *dx_rounded : dx);
  const float* pres = with_res ? dresidual->data<float>() : nullptr;
  const float* prstd = rstd.data<float>();
  float* pdx = dx.data<float>();
  std::vector<double> dw_sum(static_cast<size_t>(C), 0.0);
  std::vector<float> dyr(static_cast<size_t>(C));
  const double inv_c = 1.0 / static_cast<double>(C);
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = px + n * C;
    // dy's row as fp32: read once before dx (which may alias it) is written.
    for (int64_t c = 0; c < C; ++c) dyr[static_cast<size_t>(c)] = pdy[n * C + c];
    const float r = prstd[n];
    // Pass 1: the row mean of g·x̂, and the weight gradient.
    double gx_sum = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = static_cast<double>(xr[c] * r);
      gx_sum += static_cast<double>(dyr[c]) * pw[c] * xhat;
      dw_sum[static_cast<size_t>(c)] += dyr[c] * xhat;
    }
    const double gx_mean = gx_sum * inv_c;
    // Pass 2: dx.
    float* dxr = pdx + n * C;
    const float* resr = with_res ? pres + n * C : nullptr;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = static_cast<double>(xr[c] * r);
      const double g = static_cast<double>(dyr[c]) * pw[c];
      const float v = static_cast<float>(r * (g - xhat * gx_mean));
      dxr[c] = with_res ? resr[c] + v : (accumulate_dx ? dxr[c] + v : v);
      if (with_rounded) prounded.set(n * C + c, dxr[c]);
    }
  }
  float* pdw = dw.data<float>();
  for (int64_t c = 0; c < C; ++c) pdw[c] = static_cast<float>(pdw[c] + dw_sum[static_cast<size_t>(c)]);
  // ops.h's dx_amax: the cast's own measure of the copy the projections' GEMMs read.
  if (dx_amax) fp8_amax(*dx_amax, with_rounded ? *dx_rounded : dx);
  if (dx_row_amax) fp8_row_amax(*dx_row_amax, with_rounded ? *dx_rounded : dx);
}

}  // namespace tetra::cpu
