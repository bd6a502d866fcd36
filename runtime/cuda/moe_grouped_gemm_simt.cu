// The SIMT grouped GEMM (runtime/cuda/moe_grouped_gemm.h): fp32 FMAs on CUDA cores for any operand
// type (fp32 or bf16), any O and I and any alignment: the fp32 path (exact to fp32 rounding, so it
// matches the CPU twin to 1e-5) and the fallback where the tensor-core kernel does not apply. One
// 64×64 output tile per block of 256 threads (4×4 outputs each), k in steps of 16 through shared
// memory; tiles scheduled from the device offsets as the tensor-core kernel's
// (runtime/cuda/moe_grouped_tiles.cuh). It also multiplies FP8 codes (grouped_gemm_fp8, where the
// tensor-core kernel does not take them): the code values are exact in fp32, and the epilogue scales
// expert g's sums by a_scale[g]·b_scale[g].
#include <cuda_runtime.h>

#include <limits>

#include "runtime/cuda/device_context.h"
#include "runtime/cuda/fp8_device.cuh"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/moe_grouped_gemm.h"
#include "runtime/cuda/moe_grouped_tiles.cuh"

namespace tetra::cuda {

namespace {

constexpr int kTile = 64, kStep = 16, kThreads = 256;

struct Params {
  const void* a;
  const void* b;
  void* c;
  const int32_t* offsets;
  const float* a_scale;  // FP8: per-expert dequantisation scales, else null
  const float* b_scale;
  int G;
  int64_t R, O, I;
  int tiles_m, tiles_n;
  bool accumulate;
};

template <GroupedGemmKind KIND, class TA, class TB, class TC>
__global__ void __launch_bounds__(kThreads) grouped_gemm_simt_kernel(Params p) {
  __shared__ int s_rows[kMaxLptGroups];
  __shared__ float sa[kStep][kTile + 1], sb[kStep][kTile + 1];
  const TileAt at = locate_tile<KIND, kTile>(p.offsets, p.G, p.R, p.tiles_m, p.tiles_n, s_rows);
  if (!at.valid) return;
  int64_t r0, r1;
  group_rows(p.offsets, at.g, p.R, &r0, &r1);
  const TA* a = static_cast<const TA*>(p.a);
  const TB* b = static_cast<const TB*>(p.b);
  TC* c = static_cast<TC*>(p.c);
  const int64_t wsize = p.O * p.I;
  // A(m, k) and B(k, n) of this expert, and C's row stride (runtime/cuda/moe_grouped_gemm.h).
  int64_t M, N, K, ldc;
  if (KIND == GroupedGemmKind::Forward) {
    M = r1 - r0, N = p.O, K = p.I, ldc = p.O;
    a += r0 * p.I, b += at.g * wsize, c += r0 * p.O;
  } else if (KIND == GroupedGemmKind::BackwardInput) {
    M = r1 - r0, N = p.I, K = p.O, ldc = p.I;
    a += r0 * p.O, b += at.g * wsize, c += r0 * p.I;
  } else {
    M = p.O, N = p.I, K = r1 - r0, ldc = p.I;
    a += r0 * p.O, b += r0 * p.I, c += at.g * wsize;
    if (K == 0 && p.accumulate) return;
  }
  auto a_at = [&](int64_t m, int64_t k) {
    return KIND == GroupedGemmKind::BackwardWeight ? a[k * p.O + m] : a[m * K + k];
  };
  auto b_at = [&](int64_t k, int64_t n) {
    return KIND == GroupedGemmKind::Forward ? b[n * K + k] : b[k * N + n];
  };
  const int64_t m0 = at.m_tile * kTile, n0 = at.n_tile * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kStep) {
    for (int idx = threadIdx.x; idx < kTile * kStep; idx += kThreads) {
      // the contiguous index of each operand varies fastest across threads
      const bool a_k_fast = KIND != GroupedGemmKind::BackwardWeight, b_k_fast = KIND == GroupedGemmKind::Forward;
      const int ak = a_k_fast ? idx % kStep : idx / kTile, am = a_k_fast ? idx / kStep : idx % kTile;
      const int bk = b_k_fast ? idx % kStep : idx / kTile, bn = b_k_fast ? idx / kStep : idx % kTile;
      sa[ak][am] = (m0 + am < M && k0 + ak < K) ? to_f32(a_at(m0 + am, k0 + ak)) : 0.0f;
      sb[bk][bn] = (n0 + bn < N && k0 + bk < K) ? to_f32(b_at(k0 + bk, n0 + bn)) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kStep; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = sa[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = sb[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  const float scale = p.a_scale ? p.a_scale[at.g] * p.b_scale[at.g] : 1.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + ty * 4 + i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tx * 4 + j;
      if (n >= N) continue;
      TC* dst = c + m * ldc + n;
      const float r = acc[i][j] * scale;
      const float v = KIND == GroupedGemmKind::BackwardWeight && p.accumulate ? to_f32(*dst) + r : r;
      *dst = from_f32<TC>(v);
    }
  }
}

template <class TA, class TB, class TC>
void launch(const GroupedGemm& p, const Params& prm, unsigned grid, cudaStream_t stream) {
  switch (p.kind) {
    case GroupedGemmKind::Forward:
      grouped_gemm_simt_kernel<GroupedGemmKind::Forward, TA, TB, TC><<<grid, kThreads, 0, stream>>>(prm);
      break;
    case GroupedGemmKind::BackwardInput:
      grouped_gemm_simt_kernel<GroupedGemmKind::BackwardInput, TA, TB, TC><<<grid, kThreads, 0, stream>>>(prm);
      break;
    case GroupedGemmKind::BackwardWeight:
      grouped_gemm_simt_kernel<GroupedGemmKind::BackwardWeight, TA, TB, TC><<<grid, kThreads, 0, stream>>>(prm);
      break;
  }
  TETRA_CUDA_CHECK_LAUNCH();
}

// The kernel's parameters and grid for p; grid 0: nothing to compute.
unsigned setup(const GroupedGemm& p, Params* prm) {
  const int64_t N = p.kind == GroupedGemmKind::Forward ? p.O : p.I;
  *prm = Params{p.a, p.b, p.c, p.offsets, p.a_scale, p.b_scale, static_cast<int>(p.G), p.R, p.O, p.I,
                static_cast<int>((p.O + kTile - 1) / kTile), static_cast<int>((N + kTile - 1) / kTile), p.accumulate};
  const int64_t blocks = p.kind == GroupedGemmKind::BackwardWeight
                             ? p.G * prm->tiles_m * prm->tiles_n
                             : ((p.R + kTile - 1) / kTile + p.G) * prm->tiles_n;
  if (blocks > std::numeric_limits<int>::max())
    TETRA_FAIL(Internal, p.op, " (SIMT kernel): ", blocks, " tiles exceed one grid");
  return static_cast<unsigned>(blocks);
}

// f(e4m3{}) or f(e5m2{}) for an FP8 operand's format.
template <class F>
void dispatch_fp8(DType t, const char* op, const char* what, F&& f) {
  if (t == DType::F8E4M3) return f(e4m3{});
  if (t == DType::F8E5M2) return f(e5m2{});
  TETRA_FAIL(Internal, op, ": ", what, " is ", dtype_name(t), ", not an FP8 format");
}

}  // namespace

void grouped_gemm_simt(const GroupedGemm& p, Device device, cudaStream_t stream) {
  Params prm;
  const unsigned grid = setup(p, &prm);
  if (grid == 0) return;
  dispatch_float(p.ab_type, p.op, "the operands", [&](auto ta) {
    using TA = decltype(ta);
    dispatch_float(p.c_type, p.op, "the output", [&](auto tc) { launch<TA, TA, decltype(tc)>(p, prm, grid, stream); });
  });
  (void)device;
}

void grouped_gemm_fp8(const GroupedGemm& p, Device device, cudaStream_t stream) {
  if (!p.a_scale || !p.b_scale) TETRA_FAIL(Internal, p.op, ": an FP8 grouped GEMM needs both operands' scales");
  if (p.G == 0) return;
  if (p.fp8_transposed) return grouped_gemm_fp8_wgmma(p, device, stream);
  Params prm;
  const unsigned grid = setup(p, &prm);
  if (grid == 0) return;
  dispatch_fp8(p.ab_type, p.op, "a", [&](auto ta) {
    dispatch_fp8(p.b_fp8, p.op, "b", [&](auto tb) {
      dispatch_float(p.c_type, p.op, "the output",
                     [&](auto tc) { launch<decltype(ta), decltype(tb), decltype(tc)>(p, prm, grid, stream); });
    });
  });
  (void)device;
}

}  // namespace tetra::cuda
