// CPU causal self-attention with grouped-query heads, flash-attention style: the forward keeps only the
// output and lse (log-sum-exp of the scaled scores per query); the backward recomputes the
// probabilities from lse.
// Layout: qkv[B, T, (H + 2·Hkv)·D] = H q heads | Hkv k heads | Hkv v heads per token, each D values;
// out[B, T, H·D]; lse[B, H, T] fp32. Query head h reads key/value head h / (H / Hkv).
// Per (b, h), with Q, K, V [T, D] read in place (row stride (H + 2·Hkv)·D) and s = 1/√D:
//   S = s·Q·Kᵀ (masked above the diagonal),  P = exp(S - lse),  O = P·V
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ∘ (dP - rowsum(dO ∘ O)),  dQ = s·dS·K,  dK = s·dSᵀ·Q
// dK and dV of a key/value head are the sums over its group's query heads (zeroed, then each head's
// GEMM adds with beta = 1; with Hkv = H that is 0 + the one head's value, exactly the plain result).
// The GEMMs go through OpenBLAS; one T×T scratch (two for backward) lives for the duration of a call.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/attention_shape.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

namespace {

int i32(int64_t v) { return static_cast<int>(v); }

// S[T, T] = scale · Q · Kᵀ for one (b, h); Q and K point at row 0 with row stride qkv_stride().
void scores(float* S, const float* Q, const float* K, const AttentionDims& d, float scale) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i32(d.T), i32(d.T), i32(d.D), scale, Q, i32(d.qkv_stride()),
              K, i32(d.qkv_stride()), 0.0f, S, i32(d.T));
}

}  // namespace

void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads) {
  const char* op = "attention_forward";
  check_dtype(op, "qkv", qkv, DType::F32);  // the CPU computes in fp32; the shapes as on every backend
  const AttentionDims d = check_attention_forward_shapes(op, out, lse, qkv, n_heads, n_kv_heads);
  if (d.B == 0 || d.T == 0) return;

  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  const int64_t T = d.T;
  std::vector<float> P(static_cast<size_t>(T * T));
  const float* base = qkv.data<float>();
  float* pout = out.data<float>();
  float* plse = lse.data<float>();
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const float* tok = base + b * T * d.qkv_stride();
      const float* Q = tok + h * d.D;
      const float* K = tok + d.k_offset() + (h / d.group()) * d.D;
      const float* V = tok + d.v_offset() + (h / d.group()) * d.D;
      float* O = pout + b * T * d.out_stride() + h * d.D;
      float* L = plse + (b * d.H + h) * T;
      scores(P.data(), Q, K, d, scale);
      // Row softmax over the causal prefix j ≤ i, max-subtracted; the masked tail becomes 0.
      for (int64_t i = 0; i < T; ++i) {
        float* row = P.data() + i * T;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        std::fill(row + i + 1, row + T, 0.0f);
        L[i] = mx + static_cast<float>(std::log(sum));
      }
      // O[T, D] = P · V
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i32(T), i32(d.D), i32(T), 1.0f, P.data(), i32(T), V,
                  i32(d.qkv_stride()), 0.0f, O, i32(d.out_stride()));
    }
  }
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int64_t n_heads, int64_t n_kv_heads) {
  const char* op = "attention_backward";
  check_dtype(op, "qkv", qkv, DType::F32);
  const AttentionDims d = check_attention_backward_shapes(op, dqkv, dout, qkv, out, lse, n_heads, n_kv_heads);
  if (d.B == 0 || d.T == 0) return;

  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  const int64_t T = d.T, ldq = d.qkv_stride(), ldo = d.out_stride();
  std::vector<float> P(static_cast<size_t>(T * T)), dS(static_cast<size_t>(T * T));
  std::vector<float> delta(static_cast<size_t>(T));
  const float* base = qkv.data<float>();
  const float* pout = out.data<float>();
  const float* pdout = dout.data<float>();
  const float* plse = lse.data<float>();
  float* pdqkv = dqkv.data<float>();
  // dK and dV are sums over each group's heads: start them at zero.
  for (int64_t bt = 0; bt < d.B * T; ++bt)
    std::fill(pdqkv + bt * ldq + d.k_offset(), pdqkv + (bt + 1) * ldq, 0.0f);
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t qoff = b * T * ldq + h * d.D, ooff = b * T * ldo + h * d.D;
      const int64_t koff = b * T * ldq + d.k_offset() + (h / d.group()) * d.D;
      const int64_t voff = koff + d.Hkv * d.D;
      const float* Q = base + qoff;
      const float* K = base + koff;
      const float* V = base + voff;
      const float* O = pout + ooff;
      const float* dO = pdout + ooff;
      const float* L = plse + (b * d.H + h) * T;
      float* dQ = pdqkv + qoff;
      float* dK = pdqkv + koff;
      float* dV = pdqkv + voff;

      // P = exp(S - lse) on the causal prefix, 0 above the diagonal.
      scores(P.data(), Q, K, d, scale);
      for (int64_t i = 0; i < T; ++i) {
        float* row = P.data() + i * T;
        for (int64_t j = 0; j <= i; ++j) row[j] = std::exp(row[j] - L[i]);
        std::fill(row + i + 1, row + T, 0.0f);
      }
      // dV[T, D] += Pᵀ · dO
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i32(T), i32(d.D), i32(T), 1.0f, P.data(), i32(T), dO,
                  i32(ldo), 1.0f, dV, i32(ldq));
      // dP[T, T] = dO · Vᵀ  (into dS, turned into dS below)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i32(T), i32(T), i32(d.D), 1.0f, dO, i32(ldo), V, i32(ldq),
                  0.0f, dS.data(), i32(T));
      // delta_i = Σ_d dO[i, d]·O[i, d]  (= Σ_j P[i, j]·dP[i, j]);  dS = P ∘ (dP - delta)
      for (int64_t i = 0; i < T; ++i) {
        double acc = 0.0;
        for (int64_t k = 0; k < d.D; ++k) acc += static_cast<double>(dO[i * ldo + k]) * O[i * ldo + k];
        delta[i] = static_cast<float>(acc);
      }
      for (int64_t i = 0; i < T; ++i) {
        float* ds = dS.data() + i * T;
        const float* p = P.data() + i * T;
        for (int64_t j = 0; j <= i; ++j) ds[j] = p[j] * (ds[j] - delta[i]);
        std::fill(ds + i + 1, ds + T, 0.0f);
      }
      // dQ[T, D] = scale · dS · K;  dK[T, D] += scale · dSᵀ · Q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i32(T), i32(d.D), i32(T), scale, dS.data(), i32(T), K,
                  i32(ldq), 0.0f, dQ, i32(ldq));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i32(T), i32(d.D), i32(T), scale, dS.data(), i32(T), Q,
                  i32(ldq), 1.0f, dK, i32(ldq));
    }
  }
}

}  // namespace tetra::cpu
