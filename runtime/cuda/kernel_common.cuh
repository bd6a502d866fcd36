// Device-side building blocks of the CUDA kernels: fp32/bf16 element conversion, V-wide vector
// loads and stores (V = 8 is one or two 16-byte transactions), deterministic warp and block
// reductions, and the host-side dtype dispatch that instantiates a kernel for fp32 or bf16.
// Header-only; included by runtime/cuda/*.cu.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace tetra::cuda {

using bf16 = __nv_bfloat16;

// ---------- element conversion (fp32 compute, bf16 rounds to nearest even) ----------
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_f32(float x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return __float2bfloat16_rn(x);
  } else {
    return x;
  }
}

// ---------- amaxes (FP8 scaling) ----------
// |v| as its fp32 bit pattern: unsigned max over these is max |v| with a NaN above every number.
__device__ __forceinline__ unsigned abs_bits(float v) { return __float_as_uint(fabsf(v)); }
// The bits of |v| once stored as T (bf16 rounds): what a later pass over the stored tensor reads.
template <class T>
__device__ __forceinline__ unsigned stored_abs_bits(float v) {
  return abs_bits(to_f32(from_f32<T>(v)));
}
// Folds the block's amax bits into *amax (no-op when null, which must be the same for the whole
// block): warp, then shared-memory reduction, then at most one atomicMax per block, skipped where
// *amax already holds as much (it only grows; one atomic per warp measured 1.4 ms over SwiGLU's
// 16,384 blocks at Llama 1B's shape, all on one address). Every thread of the block must call it.
__device__ __forceinline__ void block_amax_to(unsigned* amax, unsigned m) {
  if (!amax) return;
  __shared__ unsigned warp_max[32];
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (unsigned w = 1; w < (blockDim.x + 31) / 32; ++w) m = max(m, warp_max[w]);
  if (m > *static_cast<volatile unsigned*>(amax)) atomicMax(amax, m);
}
// Folds a warp's amax bits of one row into row_amax[row] (ops.h row_amax; no-op when null): every
// lane of the warp calls it with the same row; one atomicMax per warp that saw a nonzero value (the
// rows' words are distinct addresses, so the atomics do not queue on one).
__device__ __forceinline__ void warp_row_amax_to(unsigned* row_amax, int64_t row, unsigned m) {
  if (!row_amax) return;
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(row_amax + row, m);
}

// ---------- 8 values of one or two 16-byte words as fp32 ----------
__device__ __forceinline__ void unpack_bf16x8(const uint4& u, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 t = __bfloat1622float2(h[j]);
    f[2 * j] = t.x;
    f[2 * j + 1] = t.y;
  }
}

__device__ __forceinline__ void unpack_f32x8(const float4& a, const float4& b, float (&f)[8]) {
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
  f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

// ---------- V-wide vector access ----------
// load_vec<V>(p, out): out[j] = p[j] for j < V, as fp32. V = 8 requires p to be 16-byte aligned
// (bf16: one 16-byte load; fp32: two); any other V is a plain element loop with no alignment need.
template <int V, class T>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[V]) {
  if constexpr (V == 8 && std::is_same_v<T, bf16>) {
    unpack_bf16x8(*reinterpret_cast<const uint4*>(p), out);
  } else if constexpr (V == 8 && std::is_same_v<T, float>) {
    unpack_f32x8(reinterpret_cast<const float4*>(p)[0], reinterpret_cast<const float4*>(p)[1], out);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_f32(p[j]);
  }
}

// store_vec<V>(p, in): p[j] = in[j] for j < V (bf16: round to nearest even). Alignment as load_vec.
template <int V, class T>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[V]) {
  if constexpr (V == 8 && std::is_same_v<T, bf16>) {
    int4 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(in[2 * j], in[2 * j + 1]);
    *reinterpret_cast<int4*>(p) = raw;
  } else if constexpr (V == 8 && std::is_same_v<T, float>) {
    reinterpret_cast<float4*>(p)[0] = make_float4(in[0], in[1], in[2], in[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(in[4], in[5], in[6], in[7]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = from_f32<T>(in[j]);
  }
}

// ---------- reductions (fixed order: the same inputs give the same bits every run) ----------
// Butterfly sum over the 32 lanes; every lane ends with the same value (a + b == b + a bitwise).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. Must be reached by all threads of the block. `scratch` holds 32 values of T.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous block_sum
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T t = lane < warps ? scratch[lane] : T(0);
  return warp_sum(t);
}

// ---------- host side: which kernel instantiation a dtype selects ----------
// dispatch_float(t, op, what, f): calls f(float{}) or f(bf16{}); any other dtype fails with the op's name.
template <class F>
void dispatch_float(DType t, const char* op, const char* what, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::BF16: f(bf16{}); return;
    default:
      TETRA_FAIL(Internal, op, ": ", what, " must be fp32 or bf16 on CUDA, got ", dtype_name(t));
  }
}

// dispatch_floats(op, f, dtype0, "name0", dtype1, "name1", ...): f(T0{}, T1{}, ...), each Ti float
// or bf16 as its dtype says (every combination instantiated); the operands' dtypes in one call
// instead of one nested dispatch_float per operand.
template <class F>
void dispatch_floats(const char*, F&& f) {
  f();
}
template <class F, class... Rest>
void dispatch_floats(const char* op, F&& f, DType t, const char* what, Rest... rest) {
  dispatch_float(t, op, what, [&](auto tag) {
    dispatch_floats(op, [&](auto... tags) { f(tag, tags...); }, rest...);
  });
}

}  // namespace tetra::cuda
