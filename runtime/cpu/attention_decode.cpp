// CPU twin of attention_decode (runtime/ops.h): per (b, query row r, head h) with kv = h / (H / Hkv),
//   s_j = (q_r · k_j) / √D for j ≤ r,  p = softmax(s),  out_r,h = Σ_j p_j v_j
// over the cache rows as qkv lays them out (row stride (H + 2·Hkv)·D). fp32; direct loops (a few
// queries against the cache: matrix–vector work, no GEMM to batch).
#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/attention_shape.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

void attention_decode(Tensor& out, const Tensor& cache, int64_t length, int64_t n_heads, int64_t n_kv_heads) {
  const char* op = "attention_decode";
  check_dtype(op, "cache", cache, DType::F32);
  const AttentionDims d = check_attention_decode_shapes(op, out, cache, length, n_heads, n_kv_heads);
  const int64_t Tq = out.dim(1), T_max = cache.dim(1), stride = d.qkv_stride();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  std::vector<float> s(static_cast<size_t>(length));
  for (int64_t b = 0; b < d.B; ++b) {
    const float* rows = cache.data<float>() + b * T_max * stride;
    for (int64_t i = 0; i < Tq; ++i) {
      const int64_t r = length - Tq + i;  // the query's row, and the last key it sees
      for (int64_t h = 0; h < d.H; ++h) {
        const float* q = rows + r * stride + h * d.D;
        const int64_t kv = h / d.group();
        float m = -INFINITY;
        for (int64_t j = 0; j <= r; ++j) {
          const float* k = rows + j * stride + d.k_offset() + kv * d.D;
          float dot = 0;
          for (int64_t c = 0; c < d.D; ++c) dot += q[c] * k[c];
          s[static_cast<size_t>(j)] = dot * scale;
          m = std::max(m, s[static_cast<size_t>(j)]);
        }
        float sum = 0;
        for (int64_t j = 0; j <= r; ++j) sum += (s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m));
        float* o = out.data<float>() + (b * Tq + i) * d.out_stride() + h * d.D;
        std::fill(o, o + d.D, 0.0f);
        for (int64_t j = 0; j <= r; ++j) {
          const float* v = rows + j * stride + d.v_offset() + kv * d.D;
          const float p = s[static_cast<size_t>(j)] / sum;
          for (int64_t c = 0; c < d.D; ++c) o[c] += p * v[c];
        }
      }
    }
  }
}

}  // namespace tetra::cpu
