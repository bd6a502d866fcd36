// CPU grouped expert GEMMs (runtime/ops.h): expert g owns rows [offsets[g], offsets[g + 1]) of the
// row tensors and the weight w[g] [O, I] (nn.Linear layout); one OpenBLAS GEMM per non-empty expert.
//   forward          y[rows of g]  = x[rows of g] · w[g]ᵀ
//   backward input   dx[rows of g] = dy[rows of g] · w[g]
//   backward weight  dw[g] (+)= dy[rows of g]ᵀ · x[rows of g]     (0 for an expert without rows)
// Offsets are checked: nondecreasing within [0, R]. fp32.
#include <cblas.h>

#include <algorithm>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/moe_shape.h"

namespace tetra::cpu {

namespace {

int ld(int64_t n) { return static_cast<int>(std::max<int64_t>(n, 1)); }

const int32_t* checked_offsets(const char* op, const Tensor& offsets, int64_t G, int64_t R) {
  const int32_t* o = offsets.data<int32_t>();
  for (int64_t g = 0; g <= G; ++g) {
    if (o[g] < 0 || o[g] > R || (g > 0 && o[g] < o[g - 1]))
      TETRA_FAIL(Internal, op, ": offsets[", g, "] = ", o[g], " breaks the rule 0 ≤ offsets[0] ≤ … ≤ offsets[G = ", G,
                 "] ≤ R = ", R, " (expert g owns rows [offsets[g], offsets[g + 1]))");
  }
  return o;
}

}  // namespace

void moe_grouped_linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& offsets) {
  const char* op = "moe_grouped_linear_forward";
  const MoeGemmDims d = check_moe_grouped_forward(op, y, x, w, offsets);
  check_dtype(op, "y", y, DType::F32);
  check_dtype(op, "x", x, DType::F32);
  check_dtype(op, "w", w, DType::F32);
  const int32_t* o = checked_offsets(op, offsets, d.G, d.R);
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  float* py = y.data<float>();
  for (int64_t g = 0; g < d.G; ++g) {
    const int64_t m = o[g + 1] - o[g];
    if (m == 0 || d.O == 0) continue;
    float* yg = py + o[g] * d.O;
    if (d.I == 0) {
      std::fill(yg, yg + m * d.O, 0.0f);
      continue;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(d.O),
                static_cast<int>(d.I), 1.0f, px + o[g] * d.I, ld(d.I), pw + g * d.O * d.I, ld(d.I), 0.0f, yg, ld(d.O));
  }
}

void moe_grouped_linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& offsets) {
  const char* op = "moe_grouped_linear_backward_input";
  const MoeGemmDims d = check_moe_grouped_backward_input(op, dx, dy, w, offsets);
  check_dtype(op, "dx", dx, DType::F32);
  check_dtype(op, "dy", dy, DType::F32);
  check_dtype(op, "w", w, DType::F32);
  const int32_t* o = checked_offsets(op, offsets, d.G, d.R);
  const float* pdy = dy.data<float>();
  const float* pw = w.data<float>();
  float* pdx = dx.data<float>();
  for (int64_t g = 0; g < d.G; ++g) {
    const int64_t m = o[g + 1] - o[g];
    if (m == 0 || d.I == 0) continue;
    float* dxg = pdx + o[g] * d.I;
    if (d.O == 0) {
      std::fill(dxg, dxg + m * d.I, 0.0f);
      continue;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(d.I),
                static_cast<int>(d.O), 1.0f, pdy + o[g] * d.O, ld(d.O), pw + g * d.O * d.I, ld(d.I), 0.0f, dxg,
                ld(d.I));
  }
}

void moe_grouped_linear_backward_weight(Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets,
                                        bool accumulate) {
  const char* op = "moe_grouped_linear_backward_weight";
  const MoeGemmDims d = check_moe_grouped_backward_weight(op, dw, dy, x, offsets);
  check_dtype(op, "dw", dw, DType::F32);
  check_dtype(op, "dy", dy, DType::F32);
  check_dtype(op, "x", x, DType::F32);
  const int32_t* o = checked_offsets(op, offsets, d.G, d.R);
  const float* pdy = dy.data<float>();
  const float* px = x.data<float>();
  float* pdw = dw.data<float>();
  for (int64_t g = 0; g < d.G; ++g) {
    const int64_t m = o[g + 1] - o[g];
    float* dwg = pdw + g * d.O * d.I;
    if (d.O == 0 || d.I == 0) continue;
    if (m == 0) {
      if (!accumulate) std::fill(dwg, dwg + d.O * d.I, 0.0f);
      continue;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(d.O), static_cast<int>(d.I),
                static_cast<int>(m), 1.0f, pdy + o[g] * d.O, ld(d.O), px + o[g] * d.I, ld(d.I),
                accumulate ? 1.0f : 0.0f, dwg, ld(d.I));
  }
}

}  // namespace tetra::cpu
