// FP8 codes on the device: one code from an fp32 value (cvt.rn.satfinite, the CPU's fp8_from_float
// bit for bit) and the value of a stored code (exact in fp32), so that kernels templated on their
// element type (to_f32, runtime/cuda/kernel_common.cuh) read FP8 operands as they read fp32 and bf16.
// Header-only; include it before the kernels that read codes through to_f32.
#pragma once
#include <cuda_fp8.h>

#include "runtime/cuda/kernel_common.cuh"
#include "runtime/fp8_format.h"

namespace tetra::cuda {

using e4m3 = __nv_fp8_e4m3;
using e5m2 = __nv_fp8_e5m2;

__device__ __forceinline__ float to_f32(e4m3 x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_f32(e5m2 x) { return static_cast<float>(x); }

// The code of x·r in format f (r the cast's factor, fp8_quant_factor): the product rounded to fp32
// first, then to FP8 (nearest even, saturating), as the CPU's fp8_quantize computes it.
__device__ __forceinline__ unsigned char fp8_code(float x, float r, Fp8Format f) {
  return static_cast<unsigned char>(
      __nv_cvt_float_to_fp8(__fmul_rn(x, r), __NV_SATFINITE, f == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2));
}

}  // namespace tetra::cuda
