// CPU permutation of routed tokens into expert-grouped rows and back (runtime/ops.h):
//   map        expert_ids [N, k] → offsets [E + 1], row_of [N, k], slot_of [N·k]
//   permute    rows[r] = x[slot_of[r] / k]                 backward  dx[n] (+)= Σ_j d_rows[row_of[n, j]]
//   unpermute  y[n] (+)= Σ_j w[n, j] · rows[row_of[n, j]]   backward  d_rows[row_of[n, j]] = w[n, j]·dy[n],
//                                                                    d_w[n, j] = dy[n] · rows[row_of[n, j]]
// Sums over j run in slot order in fp32, as on CUDA. Index tensors are checked element by element
// here (the CPU can afford it); out-of-range indices fail, naming the element.
#include <algorithm>
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/moe_shape.h"

namespace tetra::cpu {

namespace {

// row_of[n, j] must name a row of d_rows / rows ([0, R)).
void check_row(const char* op, int32_t row, int64_t n, int64_t j, int64_t R) {
  if (row < 0 || row >= R)
    TETRA_FAIL(Internal, op, ": row_of[", n, ", ", j, "] = ", row, " is not a row of the ", R, " expert rows");
}

// out[n] (+)= Σ_j w[n, j] · rows[row_of[n, j]] over token n's k rows, summed in fp32 in slot order;
// weights null: every w is 1 (the permutation's backward), the same bits as the plain sum since
// 1·v = v. out [N, d], rows [R, d], row_of [N, k], all fp32 or int32 as checked by the caller.
void sum_token_rows(const char* op, Tensor& out, const Tensor& rows, const float* weights, const Tensor& row_of,
                    const MoeRowDims& d, bool accumulate) {
  const float* prw = rows.data<float>();
  const int32_t* prow = row_of.data<int32_t>();
  float* po = out.data<float>();
  std::vector<float> sum(static_cast<size_t>(d.d));
  for (int64_t n = 0; n < d.N; ++n) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int64_t j = 0; j < d.k; ++j) {
      const int32_t r = prow[n * d.k + j];
      check_row(op, r, n, j, d.R);
      const float w = weights ? weights[n * d.k + j] : 1.0f;
      const float* src = prw + r * d.d;
      for (int64_t c = 0; c < d.d; ++c) sum[static_cast<size_t>(c)] += w * src[c];
    }
    float* dst = po + n * d.d;
    for (int64_t c = 0; c < d.d; ++c) dst[c] = accumulate ? dst[c] + sum[static_cast<size_t>(c)] : sum[static_cast<size_t>(c)];
  }
}

}  // namespace

void moe_permute_map(Tensor& offsets, Tensor& row_of, Tensor& slot_of, const Tensor& expert_ids) {
  const char* op = "moe_permute_map";
  const MoeRowDims d = check_moe_permute_map(op, offsets, row_of, slot_of, expert_ids);
  const int64_t N = d.N, k = d.k, E = offsets.numel() - 1;
  const int32_t* ids = expert_ids.data<int32_t>();
  int32_t* po = offsets.data<int32_t>();
  std::fill(po, po + E + 1, 0);
  for (int64_t i = 0; i < N * k; ++i) {
    if (ids[i] < 0 || ids[i] >= E)
      TETRA_FAIL(Internal, op, ": expert_ids[", i / k, ", ", i % k, "] = ", ids[i], " is not an expert of E = ", E);
    ++po[ids[i] + 1];
  }
  for (int64_t e = 0; e < E; ++e) po[e + 1] += po[e];
  std::vector<int32_t> cursor(po, po + E);
  int32_t* prow = row_of.data<int32_t>();
  int32_t* pslot = slot_of.data<int32_t>();
  for (int64_t i = 0; i < N * k; ++i) {  // token-major, so each expert's rows are in (token, slot) order
    const int32_t r = cursor[static_cast<size_t>(ids[i])]++;
    prow[i] = r;
    pslot[r] = static_cast<int32_t>(i);
  }
}

void moe_permute(Tensor& rows, const Tensor& x, const Tensor& slot_of, int64_t top_k, Tensor* row_amax) {
  const char* op = "moe_permute";
  const MoeRowDims d = check_moe_permute(op, rows, x, slot_of, top_k);
  check_dtype(op, "x", x, DType::F32);
  check_dtype(op, "rows", rows, DType::F32);
  const float* px = x.data<float>();
  const int32_t* ps = slot_of.data<int32_t>();
  float* pr = rows.data<float>();
  for (int64_t r = 0; r < d.R; ++r) {
    if (ps[r] < 0 || ps[r] >= d.N * d.k)
      TETRA_FAIL(Internal, op, ": slot_of[", r, "] = ", ps[r], " is not a slot of the ", d.N, " tokens × ", d.k);
    const float* src = px + (ps[r] / d.k) * d.d;
    std::copy(src, src + d.d, pr + r * d.d);
  }
  if (row_amax) fp8_row_amax(*row_amax, rows);
}

void moe_permute_backward(Tensor& dx, const Tensor& d_rows, const Tensor& row_of, bool accumulate) {
  const char* op = "moe_permute_backward";
  const MoeRowDims d = check_moe_permute_backward(op, dx, d_rows, row_of);
  check_dtype(op, "dx", dx, DType::F32);
  check_dtype(op, "d_rows", d_rows, DType::F32);
  sum_token_rows(op, dx, d_rows, nullptr, row_of, d, accumulate);
}

void moe_unpermute(Tensor& y, const Tensor& rows, const Tensor& weights, const Tensor& row_of, bool accumulate) {
  const char* op = "moe_unpermute";
  const MoeRowDims d = check_moe_unpermute(op, y, rows, weights, row_of);
  check_dtype(op, "y", y, DType::F32);
  check_dtype(op, "rows", rows, DType::F32);
  sum_token_rows(op, y, rows, weights.data<float>(), row_of, d, accumulate);
}

void moe_unpermute_backward(Tensor& d_rows, Tensor& d_weights, const Tensor& dy, const Tensor& rows,
                            const Tensor& weights, const Tensor& row_of, Tensor* d_rows_amax) {
  const char* op = "moe_unpermute_backward";
  const MoeRowDims d = check_moe_unpermute_backward(op, d_rows, d_weights, dy, rows, weights, row_of);
  if (d_rows.defined()) check_dtype(op, "d_rows", d_rows, DType::F32);  // undefined: d_weights alone
  check_dtype(op, "dy", dy, DType::F32);
  check_dtype(op, "rows", rows, DType::F32);
  const float* pdy = dy.data<float>();
  const float* prw = rows.data<float>();
  const float* pw = weights.data<float>();
  const int32_t* prow = row_of.data<int32_t>();
  float* pdr = d_rows.defined() ? d_rows.data<float>() : nullptr;
  float* pdw = d_weights.data<float>();
  for (int64_t n = 0; n < d.N; ++n) {
    const float* g = pdy + n * d.d;
    for (int64_t j = 0; j < d.k; ++j) {
      const int32_t r = prow[n * d.k + j];
      check_row(op, r, n, j, d.R);
      const float w = pw[n * d.k + j];
      const float* src = prw + r * d.d;
      double dot = 0.0;
      for (int64_t c = 0; c < d.d; ++c) dot += static_cast<double>(g[c]) * src[c];
      if (pdr)
        for (int64_t c = 0; c < d.d; ++c) pdr[r * d.d + c] = w * g[c];
      pdw[n * d.k + j] = static_cast<float>(dot);
    }
  }
  if (!d_rows_amax) return;  // the rows written; 0 for the others
  std::fill_n(static_cast<uint32_t*>(d_rows_amax->data_ptr()), d.R, 0u);
  for (int64_t i = 0; i < d.N * d.k; ++i) fp8_row_amax(*d_rows_amax, d_rows, prow[i], 1);
}

void moe_sort_chunks(Tensor& out, const Tensor& in, const Tensor& chunk_counts, bool inverse) {
  const char* op = "moe_sort_chunks";
  const MoeRowDims d = check_moe_sort_chunks(op, out, in, chunk_counts);
  check_dtype(op, "out", out, DType::F32);
  check_dtype(op, "in", in, DType::F32);
  const int64_t A = chunk_counts.dim(0), B = chunk_counts.dim(1);
  const int32_t* c = chunk_counts.data<int32_t>();
  // Start row of chunk (a, b) in (rank, expert) order and in (expert, rank) order.
  std::vector<int64_t> by_rank(static_cast<size_t>(A * B)), by_expert(static_cast<size_t>(A * B));
  int64_t at = 0;
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < B; ++b) {
      if (c[a * B + b] < 0)
        TETRA_FAIL(Internal, op, ": chunk_counts[", a, ", ", b, "] = ", c[a * B + b], " is negative");
      by_rank[static_cast<size_t>(a * B + b)] = at;
      at += c[a * B + b];
    }
  if (at > d.R) TETRA_FAIL(Internal, op, ": the chunks hold ", at, " rows but in has only R = ", d.R);
  at = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < A; ++a) {
      by_expert[static_cast<size_t>(a * B + b)] = at;
      at += c[a * B + b];
    }
  const float* src = in.data<float>();
  float* dst = out.data<float>();
  for (int64_t i = 0; i < A * B; ++i) {
    const int64_t from = inverse ? by_expert[static_cast<size_t>(i)] : by_rank[static_cast<size_t>(i)];
    const int64_t to = inverse ? by_rank[static_cast<size_t>(i)] : by_expert[static_cast<size_t>(i)];
    std::copy(src + from * d.d, src + (from + c[i]) * d.d, dst + to * d.d);
  }
}

void moe_chunk_offsets(Tensor& offsets, const Tensor& chunk_counts) {
  check_moe_chunk_offsets("moe_chunk_offsets", offsets, chunk_counts);
  const int64_t A = chunk_counts.dim(0), B = chunk_counts.dim(1);
  const int32_t* c = chunk_counts.data<int32_t>();
  int32_t* o = offsets.data<int32_t>();
  o[0] = 0;
  for (int64_t b = 0; b < B; ++b) {
    int32_t sum = 0;
    for (int64_t a = 0; a < A; ++a) sum += c[a * B + b];
    o[b + 1] = o[b] + sum;
  }
}

}  // namespace tetra::cpu
