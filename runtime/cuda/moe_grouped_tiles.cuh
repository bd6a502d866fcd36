// Device-side tile scheduling of the grouped expert GEMMs (runtime/cuda/moe_grouped_gemm.h): which
// expert and which output tile a block computes, found from the offsets in device memory, so that no
// host synchronisation is needed. Header-only; included by the grouped GEMM kernels.
//   Forward / BackwardInput: the tiles of every expert listed in expert order, ⌈m_g/BM⌉·tiles_n each
//   (n fastest); block b takes the b-th, or none past the end (the grid is an upper bound).
//   BackwardWeight: tiles_m·tiles_n tiles per expert; block b takes expert rank b / (tiles_m·tiles_n)
//   in the order of falling row count (ties by index; for G ≤ kMaxLptGroups, else expert order).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/moe_grouped_gemm.h"

namespace tetra::cuda {

constexpr int kMaxLptGroups = 256;

// Clamped rows [*start, *end) of group g within [0, R].
__device__ __forceinline__ void group_rows(const int32_t* offsets, int g, int64_t R, int64_t* start, int64_t* end) {
  int64_t s = offsets[g], e = offsets[g + 1];
  s = s < 0 ? 0 : (s > R ? R : s);
  e = e < s ? s : (e > R ? R : e);
  *start = s;
  *end = e;
}

// The inclusive prefix sum of v over the lanes of a (full) warp.
__device__ __forceinline__ int warp_inclusive_sum(int v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// The last g in [0, n) with starts[g] ≤ t, for nondecreasing starts with starts[0] ≤ t (segments
// that are empty share their start with the next: the one that holds t is the last).
__device__ __forceinline__ int last_start_at_or_before(const int* starts, int n, int64_t t) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (starts[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

struct TileAt {
  int g;
  int64_t m_tile, n_tile;
  bool valid;
};

// Called by every thread of the block (it synchronises); every thread gets the same answer.
// scratch: shared memory of kMaxLptGroups ints.
template <GroupedGemmKind KIND, int BM>
__device__ TileAt locate_tile(const int32_t* offsets, int G, int64_t R, int tiles_m, int tiles_n, int* scratch) {
  __shared__ int64_t s_tile[4];  // group, m tile, n tile, valid
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (KIND != GroupedGemmKind::BackwardWeight) {
    if (warp == 0) {
      const int64_t tile = blockIdx.x;
      int64_t prefix = 0;
      bool found = false;
      for (int g0 = 0; g0 < G && !found; g0 += 32) {
        const int g = g0 + lane;
        int64_t tiles = 0;
        if (g < G) {
          int64_t s, e;
          group_rows(offsets, g, R, &s, &e);
          tiles = (e - s + BM - 1) / BM * tiles_n;
        }
        int64_t incl = tiles;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const int64_t v = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += v;
        }
        const int64_t lo = prefix + incl - tiles;
        const bool mine = g < G && tile >= lo && tile < prefix + incl;
        if (__ballot_sync(0xffffffffu, mine)) {
          found = true;
          if (mine) {
            const int64_t local = tile - lo;
            s_tile[0] = g;
            s_tile[1] = local / tiles_n;
            s_tile[2] = local % tiles_n;
            s_tile[3] = 1;
          }
        }
        prefix += __shfl_sync(0xffffffffu, incl, 31);
      }
      if (!found && lane == 0) s_tile[3] = 0;
    }
  } else {
    const int64_t per_group = static_cast<int64_t>(tiles_m) * tiles_n;
    const int rank = static_cast<int>(blockIdx.x / per_group);
    const int64_t local = blockIdx.x % per_group;
    if (threadIdx.x == 0) {
      s_tile[0] = rank;
      s_tile[1] = local / tiles_n;
      s_tile[2] = local % tiles_n;
      s_tile[3] = 1;
    }
    if (G <= kMaxLptGroups) {
      for (int g = threadIdx.x; g < G; g += blockDim.x) {
        int64_t s, e;
        group_rows(offsets, g, R, &s, &e);
        scratch[g] = static_cast<int>(e - s);
      }
      __syncthreads();
      for (int g = threadIdx.x; g < G; g += blockDim.x) {
        const int mg = scratch[g];
        int r = 0;
        for (int h = 0; h < G; ++h) r += scratch[h] > mg || (scratch[h] == mg && h < g);
        if (r == rank) s_tile[0] = g;
      }
    }
  }
  __syncthreads();
  TileAt t{static_cast<int>(s_tile[0]), s_tile[1], s_tile[2], s_tile[3] != 0};
  __syncthreads();  // s_tile may be reused by a later call
  return t;
}

}  // namespace tetra::cuda
