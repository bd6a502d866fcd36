// CUDA permutation of routed tokens into expert-grouped rows and back (runtime/ops.h):
//   map        expert_ids [N, k] → offsets [E + 1], row_of [N, k], slot_of [N·k]
//   permute    rows[r] = x[slot_of[r] / k]                 backward  dx[n] (+)= Σ_j d_rows[row_of[n, j]]
//   unpermute  y[n] (+)= Σ_j w[n, j] · rows[row_of[n, j]]   backward  d_rows[row_of[n, j]] = w[n, j]·dy[n],
//                                                                    d_w[n, j] = dy[n] · rows[row_of[n, j]]
//   sort_chunks  expert-parallel chunks (rank, expert) ↔ (expert, rank); chunk_offsets
// The map is three small kernels over chunks of 1024 slots (flat slot index n·k + j, so token-major):
// a per-chunk histogram of expert ids; one block that turns the histograms into the expert offsets
// and each chunk's first row per expert; and a scatter in which each warp ranks its 32 slots among
// equal ids with __match_any_sync and the block walks its chunk in order. No sort, no atomics on
// positions: the order (expert, token, slot) is the CPU twin's exactly, and so are the bytes.
// Ids outside [0, E) count for no expert: their row_of is −1, and the rows past offsets[E] that they
// leave empty have slot_of −1; the data kernels skip both (zeros, for permute's rows), so nothing
// reads or writes outside the tensors.
// The data kernels move 16-byte vectors (8 values) when d % 8 == 0 and every tensor is 16-byte
// aligned, else one value per thread; sums over j run in slot order in fp32. Bytes at the issue's
// shape (N = 16384, k = 6, d = 1536, bf16; R = 98304 rows of 3 KB): permute reads x (50 MB, each row
// k times, mostly from L2) and writes 302 MB; unpermute the reverse; unpermute_backward reads dy and
// the rows and writes d_rows (654 MB): ≈ 80, 80 and 150 µs at 4.3 TB/s.
#include <cuda_runtime.h>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/moe_shape.h"

namespace tetra::cuda {

namespace {

constexpr int kMapThreads = 256;
constexpr int kMapChunk = 1024;  // slots per chunk: 4 tiles of 256
constexpr int kMapMaxExperts = 1024;
constexpr int kRowThreads = 256;

// chunk_hist[c, e] = slots of chunk c routed to expert e.
__global__ void __launch_bounds__(kMapThreads)
    map_histogram_kernel(int32_t* __restrict__ chunk_hist, const int32_t* __restrict__ ids, int64_t slots, int E) {
  __shared__ int32_t hist[kMapMaxExperts];
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kMapChunk;
  const int64_t end = begin + kMapChunk < slots ? begin + kMapChunk : slots;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const int32_t e = ids[i];
    if (e >= 0 && e < E) atomicAdd(&hist[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) chunk_hist[static_cast<int64_t>(blockIdx.x) * E + e] = hist[e];
}

// One block of 1024 threads: offsets[e] = Σ_{e' < e} Σ_c hist[c, e'] (offsets[E] = the total), and
// chunk_base[c, e] = offsets[e] + Σ_{c' < c} hist[c', e]. E ≤ 1024: thread e owns expert e.
__global__ void __launch_bounds__(1024)
    map_offsets_kernel(int32_t* __restrict__ offsets, int32_t* __restrict__ chunk_base,
                       const int32_t* __restrict__ chunk_hist, int chunks, int E) {
  __shared__ int32_t warp_total[32];
  const int e = threadIdx.x, lane = e % 32, warp = e / 32;
  int32_t total = 0;
  if (e < E)
    for (int c = 0; c < chunks; ++c) total += chunk_hist[static_cast<int64_t>(c) * E + e];
  // inclusive scan of total over e: within the warp, then over the warps' totals
  int32_t incl = total;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int32_t w = lane < static_cast<int>(blockDim.x / 32) ? warp_total[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t v = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += v;
    }
    warp_total[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  const int32_t start = incl - total + (warp > 0 ? warp_total[warp - 1] : 0);
  if (e < E) {
    offsets[e] = start;
    if (e == E - 1) offsets[E] = start + total;
    int32_t run = start;
    for (int c = 0; c < chunks; ++c) {
      chunk_base[static_cast<int64_t>(c) * E + e] = run;
      run += chunk_hist[static_cast<int64_t>(c) * E + e];
    }
  }
}

// Chunk c in tiles of 256 slots, in order: a slot's row is its expert's next free row of the chunk
// (chunk_base + the slots of that expert already placed) + its rank among the equal ids before it in
// the tile (earlier warps, then earlier lanes of its own warp).
__global__ void __launch_bounds__(kMapThreads)
    map_scatter_kernel(int32_t* __restrict__ row_of, int32_t* __restrict__ slot_of,
                       const int32_t* __restrict__ chunk_base, const int32_t* __restrict__ ids, int64_t slots, int E) {
  constexpr int kWarps = kMapThreads / 32;
  __shared__ int32_t next[kMapMaxExperts];
  __shared__ int32_t warp_count[kWarps][kMapMaxExperts];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    next[e] = chunk_base[static_cast<int64_t>(blockIdx.x) * E + e];
    for (int w = 0; w < kWarps; ++w) warp_count[w][e] = 0;
  }
  __syncthreads();
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kMapChunk;
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int64_t tile = begin; tile < begin + kMapChunk && tile < slots; tile += kMapThreads) {
    const int64_t i = tile + threadIdx.x;
    int32_t e = i < slots ? ids[i] : -1;
    if (e >= E) e = -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(same & lanes_below);
    if (e >= 0 && rank == 0) warp_count[warp][e] = __popc(same);
    __syncthreads();
    if (e >= 0) {
      int32_t row = next[e] + rank;
      for (int w = 0; w < warp; ++w) row += warp_count[w][e];
      row_of[i] = row;
      slot_of[row] = static_cast<int32_t>(i);
    } else if (i < slots) {
      row_of[i] = -1;
    }
    __syncthreads();
    for (int x = threadIdx.x; x < E; x += blockDim.x) {
      int32_t placed = 0;
      for (int w = 0; w < kWarps; ++w) {
        placed += warp_count[w][x];
        warp_count[w][x] = 0;
      }
      next[x] += placed;
    }
    __syncthreads();
  }
}

// slot_of[r] = −1 for r in [offsets[E], slots): rows no valid id reached (only with bad ids).
__global__ void map_unused_rows_kernel(int32_t* slot_of, const int32_t* offsets, int E, int64_t slots) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = offsets[E] + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < slots; r += stride)
    slot_of[r] = -1;
}

// rows[r, :] = x[slot_of[r] / k, :] (zeros where slot_of[r] is no slot). One thread per V values.
// row_amax (may be null, zeroed): each row's amax bits as stored; with warp_rows (d / V a multiple of
// 32) a warp's items lie in one row and the loop's trip count is the same for its lanes: one atomic
// per warp; else one per thread.
template <int V, class TR, class TX>
__global__ void __launch_bounds__(kRowThreads)
    permute_kernel(TR* __restrict__ rows, const TX* __restrict__ x, const int32_t* __restrict__ slot_of, int64_t R,
                   int64_t d, int64_t k, int64_t slots, unsigned* row_amax, bool warp_rows) {
  const int64_t per_row = d / V, items = R * per_row;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < items;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = item / per_row, c = (item % per_row) * V;
    const int32_t slot = slot_of[r];
    float v[V];
    if (slot >= 0 && slot < slots) {
      load_vec<V>(x + (slot / k) * d + c, v);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = 0.0f;
    }
    store_vec<V>(rows + r * d + c, v);
    if (!row_amax) continue;
    unsigned m = 0;
#pragma unroll
    for (int j = 0; j < V; ++j) m = max(m, stored_abs_bits<TR>(v[j]));
    if (warp_rows)
      warp_row_amax_to(row_amax, r, m);
    else if (m != 0)
      atomicMax(row_amax + r, m);
  }
}

// out[n, :] (+)= Σ_j (w ? w[n, j] : 1) · rows[row_of[n, j], :] — the combine (weighted) and the
// permute's backward (unweighted). Rows outside [0, R) are skipped.
template <int V, class TO, class TR>
__global__ void __launch_bounds__(kRowThreads)
    gather_sum_kernel(TO* __restrict__ out, const TR* __restrict__ rows, const float* __restrict__ w,
                      const int32_t* __restrict__ row_of, int64_t N, int64_t k, int64_t d, int64_t R, bool accumulate) {
  const int64_t per_row = d / V, items = N * per_row;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < items;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = item / per_row, c = (item % per_row) * V;
    float acc[V];
#pragma unroll
    for (int t = 0; t < V; ++t) acc[t] = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = row_of[n * k + j];
      if (r < 0 || r >= R) continue;
      const float wj = w ? w[n * k + j] : 1.0f;
      float v[V];
      load_vec<V>(rows + r * d + c, v);
#pragma unroll
      for (int t = 0; t < V; ++t) acc[t] += wj * v[t];
    }
    TO* dst = out + n * d + c;
    if (accumulate) {
      float old[V];
      load_vec<V>(dst, old);
#pragma unroll
      for (int t = 0; t < V; ++t) acc[t] = old[t] + acc[t];
    }
    store_vec<V>(dst, acc);
  }
}

// One warp per token n: for each slot j, d_rows[row] = w[n, j]·dy[n] and d_w[n, j] = dy[n]·rows[row]
// (lane-strided partial dot products, then a butterfly: a fixed order).
// d_rows may be null: d_weights alone. kRowValues: d_rows or their amax are asked for; the weights-only
// instantiation (the FP8 backward's call, d_rows made by the gathered cast) leaves out d_rows' values
// and amax arithmetic, about half of the instructions a vector. (A form that held a token's dy in
// registers across its slots ran slower: docs/kernels.md, FP8 training v12.)
template <int V, bool kRowValues, class TDR, class TDY, class TR>
__global__ void __launch_bounds__(kRowThreads)
    unpermute_backward_kernel(TDR* __restrict__ d_rows, float* __restrict__ d_w, const TDY* __restrict__ dy,
                              const TR* __restrict__ rows, const float* __restrict__ w,
                              const int32_t* __restrict__ row_of, int64_t N, int64_t k, int64_t d, int64_t R,
                              unsigned* d_rows_amax) {
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int64_t per_row = d / V;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32; n < N;
       n += static_cast<int64_t>(gridDim.x) * warps) {
    const TDY* g = dy + n * d;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = row_of[n * k + j];
      const bool valid = r >= 0 && r < R;
      const float wj = w[n * k + j];
      float dot = 0.0f;
      unsigned m = 0;  // the row's amax bits as stored (d_rows_amax)
      if (valid) {
        for (int64_t chunk = lane; chunk < per_row; chunk += 32) {
          float gv[V], rv[V];
          load_vec<V>(g + chunk * V, gv);
          load_vec<V>(rows + r * d + chunk * V, rv);
#pragma unroll
          for (int t = 0; t < V; ++t) dot += gv[t] * rv[t];
          if constexpr (kRowValues) {
            float out[V];
#pragma unroll
            for (int t = 0; t < V; ++t) {
              out[t] = wj * gv[t];
              m = max(m, stored_abs_bits<TDR>(out[t]));
            }
            if (d_rows) store_vec<V>(d_rows + r * d + chunk * V, out);
          }
        }
      }
      // The warp owns row r: a store, not an atomic (rows no slot maps to keep the zero).
      if (d_rows_amax && valid) {
        m = __reduce_max_sync(0xffffffffu, m);
        if (lane == 0) d_rows_amax[r] = m;
      }
      dot = warp_sum(dot);
      if (lane == 0) d_w[n * k + j] = valid ? dot : 0.0f;
    }
  }
}

// ---------- expert-parallel chunks ----------

constexpr int kMaxChunks = 4096;  // ranks × local experts

// Chunk starts in both orders, in shared memory, for every block: by_rank[a·B + b] and by_expert[a·B + b]
// (A·B ≤ kMaxChunks; thread 0 scans, the sizes are small), and the total.
__device__ void chunk_starts(int32_t* by_rank, int32_t* by_expert, int32_t* total, const int32_t* counts, int A,
                             int B) {
  if (threadIdx.x == 0) {
    int32_t at = 0;
    for (int i = 0; i < A * B; ++i) {
      by_rank[i] = at;
      at += counts[i] > 0 ? counts[i] : 0;
    }
    *total = at;
    at = 0;
    for (int b = 0; b < B; ++b)
      for (int a = 0; a < A; ++a) {
        by_expert[a * B + b] = at;
        at += counts[a * B + b] > 0 ? counts[a * B + b] : 0;
      }
  }
  __syncthreads();
}

// out row r (< the total and < R) comes from its chunk's row in the other order; the chunk is found
// by binary search over the chunk starts in out's order (t-th chunk: rank-major or expert-major).
template <int V, class T>
__global__ void __launch_bounds__(kRowThreads)
    sort_chunks_kernel(T* __restrict__ out, const T* __restrict__ in, const int32_t* __restrict__ counts, int A, int B,
                       int64_t R, int64_t d, bool inverse) {
  __shared__ int32_t by_rank[kMaxChunks], by_expert[kMaxChunks];
  __shared__ int32_t total;
  chunk_starts(by_rank, by_expert, &total, counts, A, B);
  const int64_t rows = total < R ? total : R, per_row = d / V, items = rows * per_row;
  const int chunks = A * B;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < items;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = item / per_row, c = (item % per_row) * V;
    // t-th chunk in out's order ↔ chunk (a, b): inverse → rank-major (t = a·B + b), else expert-major (t = b·A + a)
    int lo = 0, hi = chunks - 1;
    while (lo < hi) {  // the last chunk whose start ≤ r
      const int mid = (lo + hi + 1) / 2;
      const int i = inverse ? mid : (mid % A) * B + mid / A;
      if ((inverse ? by_rank[i] : by_expert[i]) <= r) lo = mid;
      else hi = mid - 1;
    }
    // Among equal starts (empty chunks) the last one wins, which is the non-empty one holding r.
    const int i = inverse ? lo : (lo % A) * B + lo / A;
    const int64_t from = (inverse ? by_expert[i] : by_rank[i]) + (r - (inverse ? by_rank[i] : by_expert[i]));
    float v[V];
    load_vec<V>(in + from * d + c, v);
    store_vec<V>(out + r * d + c, v);
  }
}

// offsets[b] = Σ_{b' < b} Σ_a counts[a, b'] (one block).
__global__ void chunk_offsets_kernel(int32_t* offsets, const int32_t* counts, int A, int B) {
  if (threadIdx.x != 0) return;
  int32_t at = 0;
  offsets[0] = 0;
  for (int b = 0; b < B; ++b) {
    for (int a = 0; a < A; ++a) at += counts[a * B + b] > 0 ? counts[a * B + b] : 0;
    offsets[b + 1] = at;
  }
}

// V = 8 needs d % 8 == 0 and every tensor 16-byte aligned (row starts then are too).
bool vectorizable(int64_t d, std::initializer_list<const Tensor*> ts) {
  if (d % 8 != 0) return false;
  for (const Tensor* t : ts)
    if (!aligned16(t->data_ptr()) || (d * static_cast<int64_t>(dtype_size(t->dtype()))) % 16 != 0) return false;
  return true;
}

template <class F>
void with_width(bool vec, F&& f) {
  if (vec) f(std::integral_constant<int, 8>{});
  else f(std::integral_constant<int, 1>{});
}

void check_index(const char* op, const char* what, const Tensor& t) { check_cuda_tensor(op, what, t); }

}  // namespace

void moe_permute_map(Tensor& offsets, Tensor& row_of, Tensor& slot_of, const Tensor& expert_ids) {
  const char* op = "moe_permute_map";
  const MoeRowDims d = check_moe_permute_map(op, offsets, row_of, slot_of, expert_ids);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"offsets", &offsets}, {"row_of", &row_of},
                                {"slot_of", &slot_of}, {"expert_ids", &expert_ids}})
    check_index(op, name, *t);
  const int64_t E = offsets.numel() - 1, slots = d.R;
  if (E > kMapMaxExperts) TETRA_FAIL(Internal, op, ": the CUDA map takes at most ", kMapMaxExperts, " experts, got ", E);
  const Device dev = expert_ids.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  if (slots == 0) {
    TETRA_CUDA_CHECK(cudaMemsetAsync(offsets.data_ptr(), 0, offsets.nbytes(), stream));
    return;
  }
  const int64_t chunks = (slots + kMapChunk - 1) / kMapChunk;
  Tensor scratch = Tensor::empty({2 * chunks * E}, DType::I32, dev);  // histograms, then bases
  int32_t* hist = scratch.data<int32_t>();
  int32_t* base = hist + chunks * E;
  map_histogram_kernel<<<static_cast<unsigned>(chunks), kMapThreads, 0, stream>>>(hist, expert_ids.data<int32_t>(),
                                                                                  slots, static_cast<int>(E));
  TETRA_CUDA_CHECK_LAUNCH();
  map_offsets_kernel<<<1, 1024, 0, stream>>>(offsets.data<int32_t>(), base, hist, static_cast<int>(chunks),
                                             static_cast<int>(E));
  TETRA_CUDA_CHECK_LAUNCH();
  map_scatter_kernel<<<static_cast<unsigned>(chunks), kMapThreads, 0, stream>>>(
      row_of.data<int32_t>(), slot_of.data<int32_t>(), base, expert_ids.data<int32_t>(), slots, static_cast<int>(E));
  TETRA_CUDA_CHECK_LAUNCH();
  map_unused_rows_kernel<<<grid_size(slots, 256, dev, 1), 256, 0, stream>>>(slot_of.data<int32_t>(),
                                                                            offsets.data<int32_t>(),
                                                                            static_cast<int>(E), slots);
  TETRA_CUDA_CHECK_LAUNCH();
}

void moe_permute(Tensor& rows, const Tensor& x, const Tensor& slot_of, int64_t top_k, Tensor* row_amax) {
  const char* op = "moe_permute";
  const MoeRowDims d = check_moe_permute(op, rows, x, slot_of, top_k);
  check_cuda_float(op, "rows", rows);
  check_cuda_float(op, "x", x);
  check_index(op, "slot_of", slot_of);
  const Device dev = rows.device();
  DeviceScope scope(dev);
  unsigned* pr = start_amax(op, row_amax, stream_of(dev));
  if (d.R == 0 || d.d == 0) return;
  const bool vec = vectorizable(d.d, {&rows, &x});
  with_width(vec, [&](auto v) {
    constexpr int V = decltype(v)::value;
    const bool warp_rows = (d.d / V) % 32 == 0;
    dispatch_float(rows.dtype(), op, "rows", [&](auto tr) {
      dispatch_float(x.dtype(), op, "x", [&](auto tx) {
        using TR = decltype(tr);
        using TX = decltype(tx);
        permute_kernel<V, TR, TX><<<grid_size(d.R * d.d / V, kRowThreads, dev), kRowThreads, 0, stream_of(dev)>>>(
            static_cast<TR*>(rows.data_ptr()), static_cast<const TX*>(x.data_ptr()), slot_of.data<int32_t>(), d.R,
            d.d, top_k, d.N * top_k, pr, warp_rows);
        TETRA_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

namespace {

void gather_sum(const char* op, Tensor& out, const Tensor& rows, const float* w, const Tensor& row_of,
                const MoeRowDims& d, bool accumulate) {
  if (d.N == 0 || d.d == 0) return;
  const Device dev = out.device();
  DeviceScope scope(dev);
  const bool vec = vectorizable(d.d, {&out, &rows});
  with_width(vec, [&](auto v) {
    constexpr int V = decltype(v)::value;
    dispatch_float(out.dtype(), op, "the output", [&](auto to) {
      dispatch_float(rows.dtype(), op, "the rows", [&](auto tr) {
        using TO = decltype(to);
        using TR = decltype(tr);
        gather_sum_kernel<V, TO, TR><<<grid_size(d.N * d.d / V, kRowThreads, dev), kRowThreads, 0, stream_of(dev)>>>(
            static_cast<TO*>(out.data_ptr()), static_cast<const TR*>(rows.data_ptr()), w, row_of.data<int32_t>(), d.N,
            d.k, d.d, d.R, accumulate);
        TETRA_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace

void moe_permute_backward(Tensor& dx, const Tensor& d_rows, const Tensor& row_of, bool accumulate) {
  const char* op = "moe_permute_backward";
  const MoeRowDims d = check_moe_permute_backward(op, dx, d_rows, row_of);
  check_cuda_float(op, "dx", dx);
  check_cuda_float(op, "d_rows", d_rows);
  check_index(op, "row_of", row_of);
  gather_sum(op, dx, d_rows, nullptr, row_of, d, accumulate);
}

void moe_unpermute(Tensor& y, const Tensor& rows, const Tensor& weights, const Tensor& row_of, bool accumulate) {
  const char* op = "moe_unpermute";
  const MoeRowDims d = check_moe_unpermute(op, y, rows, weights, row_of);
  check_cuda_float(op, "y", y);
  check_cuda_float(op, "rows", rows);
  check_index(op, "weights", weights);
  check_index(op, "row_of", row_of);
  gather_sum(op, y, rows, weights.data<float>(), row_of, d, accumulate);
}

void moe_unpermute_backward(Tensor& d_rows, Tensor& d_weights, const Tensor& dy, const Tensor& rows,
                            const Tensor& weights, const Tensor& row_of, Tensor* d_rows_amax) {
  const char* op = "moe_unpermute_backward";
  const MoeRowDims d = check_moe_unpermute_backward(op, d_rows, d_weights, dy, rows, weights, row_of);
  const bool with_rows = d_rows.defined();  // else d_weights alone (ops.h)
  if (with_rows) check_cuda_float(op, "d_rows", d_rows);
  check_cuda_float(op, "dy", dy);
  check_cuda_float(op, "rows", rows);
  check_index(op, "d_weights", d_weights);
  check_index(op, "weights", weights);
  check_index(op, "row_of", row_of);
  const Device dev = dy.device();
  DeviceScope scope(dev);
  unsigned* pr = start_amax(op, d_rows_amax, stream_of(dev));
  if (d.N == 0) return;
  if (d.d == 0) {
    TETRA_CUDA_CHECK(cudaMemsetAsync(d_weights.data_ptr(), 0, d_weights.nbytes(), stream_of(dev)));
    return;
  }
  const bool vec = with_rows ? vectorizable(d.d, {&d_rows, &dy, &rows}) : vectorizable(d.d, {&dy, &rows});
  const int warps = kRowThreads / 32;
  with_width(vec, [&](auto v) {
    constexpr int V = decltype(v)::value;
    dispatch_floats(
        op,
        [&](auto tdr, auto tdy, auto tr) {
          using TDR = decltype(tdr);
          using TDY = decltype(tdy);
          using TR = decltype(tr);
          TDR* pd = with_rows ? static_cast<TDR*>(d_rows.data_ptr()) : nullptr;
          const auto* pdy = static_cast<const TDY*>(dy.data_ptr());
          const auto* prows = static_cast<const TR*>(rows.data_ptr());
          const unsigned grid = static_cast<unsigned>(grid_size(d.N, warps, dev, 8));
          auto kernel = pd || pr ? unpermute_backward_kernel<V, true, TDR, TDY, TR>
                                 : unpermute_backward_kernel<V, false, TDR, TDY, TR>;
          kernel<<<grid, kRowThreads, 0, stream_of(dev)>>>(pd, d_weights.data<float>(), pdy, prows,
                                                           weights.data<float>(), row_of.data<int32_t>(), d.N, d.k,
                                                           d.d, d.R, pr);
          TETRA_CUDA_CHECK_LAUNCH();
        },
        with_rows ? d_rows.dtype() : dy.dtype(), "d_rows", dy.dtype(), "dy", rows.dtype(), "rows");
  });
}

void moe_sort_chunks(Tensor& out, const Tensor& in, const Tensor& chunk_counts, bool inverse) {
  const char* op = "moe_sort_chunks";
  const MoeRowDims d = check_moe_sort_chunks(op, out, in, chunk_counts);
  check_cuda_float(op, "out", out);
  check_cuda_float(op, "in", in);
  check_index(op, "chunk_counts", chunk_counts);
  const int64_t A = chunk_counts.dim(0), B = chunk_counts.dim(1);
  if (A * B > kMaxChunks)
    TETRA_FAIL(Internal, op, ": the CUDA kernel takes at most ", kMaxChunks, " chunks (ranks × experts), got ", A, " × ", B);
  if (d.R == 0 || d.d == 0 || A * B == 0) return;
  const Device dev = in.device();
  DeviceScope scope(dev);
  const bool vec = vectorizable(d.d, {&out, &in});
  with_width(vec, [&](auto v) {
    constexpr int V = decltype(v)::value;
    dispatch_float(out.dtype(), op, "out", [&](auto to) {
      using T = decltype(to);
      if (in.dtype() != out.dtype()) TETRA_FAIL(Internal, op, ": in and out must have one dtype, got ", in.describe());
      sort_chunks_kernel<V, T><<<grid_size(d.R * d.d / V, kRowThreads, dev, 4), kRowThreads, 0, stream_of(dev)>>>(
          static_cast<T*>(out.data_ptr()), static_cast<const T*>(in.data_ptr()), chunk_counts.data<int32_t>(),
          static_cast<int>(A), static_cast<int>(B), d.R, d.d, inverse);
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
}

void moe_chunk_offsets(Tensor& offsets, const Tensor& chunk_counts) {
  const char* op = "moe_chunk_offsets";
  check_moe_chunk_offsets(op, offsets, chunk_counts);
  check_index(op, "offsets", offsets);
  check_index(op, "chunk_counts", chunk_counts);
  const Device dev = offsets.device();
  DeviceScope scope(dev);
  chunk_offsets_kernel<<<1, 32, 0, stream_of(dev)>>>(offsets.data<int32_t>(), chunk_counts.data<int32_t>(),
                                                    static_cast<int>(chunk_counts.dim(0)),
                                                    static_cast<int>(chunk_counts.dim(1)));
  TETRA_CUDA_CHECK_LAUNCH();
}

}  // namespace tetra::cuda
