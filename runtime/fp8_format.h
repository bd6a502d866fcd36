// The two 8-bit floating-point formats of Hopper's tensor cores (OCP FP8):
//   E4M3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; largest finite 448, no infinities, NaN is
//         S.1111.111. Weights and activations: more precision.
//   E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; largest finite 57344, infinities and NaNs
//         as IEEE. Gradients: more range.
// Conversion from fp32 rounds to nearest, ties to even, and saturates out-of-range values (±inf
// too) to ±largest finite: what CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) does on sm_89+
// (cvt.rn.satfinite), so the CPU backend's emulation and the CUDA kernels agree bit for bit. NaN
// stays NaN (0x7F with x's sign bit cleared, as CUDA returns).
#pragma once
#include <cstdint>
#include <cstring>

#include "runtime/dtype.h"
#include "runtime/host_device.h"

namespace tetra {

enum class Fp8Format : uint8_t { E4M3, E5M2 };

constexpr float fp8_largest(Fp8Format f) { return f == Fp8Format::E4M3 ? 448.0f : 57344.0f; }
const char* fp8_format_name(Fp8Format f);  // "e4m3", "e5m2"
Fp8Format fp8_format_of(DType t);           // F8E4M3 / F8E5M2; throws for any other dtype
DType dtype_of(Fp8Format f);

// The value of an FP8 code (exact in fp32).
float fp8_to_float(uint8_t code, Fp8Format f);
// x rounded to the nearest FP8 value (ties to even), saturated to ±fp8_largest(f).
uint8_t fp8_from_float(float x, Fp8Format f);

// |v| as its fp32 bit pattern, the order every amax compares in: an unsigned max over these is the
// largest |v|, with a NaN above every number (the CUDA kernels' abs_bits, runtime/cuda/kernel_common.cuh).
inline uint32_t fp8_abs_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits & 0x7fffffffu;
}

// The factor r that maps a group of values with largest magnitude `amax` onto the format's range
// (q = fp8(x·r)); amax below 1e-12, zero or NaN count as 1e-12 so r stays finite. One definition
// for the CPU backend and the CUDA kernels: IEEE fp32 division in both, the same bits.
TETRA_HOST_DEVICE inline float fp8_quant_factor(float amax, float largest) {
  return largest / (amax >= 1e-12f ? amax : 1e-12f);
}

// An expert's m rows as the grouped FP8 GEMMs' transposed operands lay them out: whole 128-row
// blocks (ops::kFp8Block), zero codes after the rows (ops::moe_grouped_fp8_cast's padded offsets).
TETRA_HOST_DEVICE constexpr int64_t fp8_padded_expert_rows(int64_t m) { return (m + 127) / 128 * 128; }

}  // namespace tetra
