// Element types of tensors. The CPU backend computes in fp32; CUDA in bf16 with fp32 accumulation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tetra {

// F8E4M3 / F8E5M2: Hopper's FP8 formats (runtime/fp8_format.h), one byte per value.
enum class DType : uint8_t { F32, BF16, I32, I64, U16, U32, U8, F64, F8E4M3, F8E5M2 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // "fp32", "bf16", ...; throws on unknown

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::U16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::U32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }

// bfloat16 as raw bits on the host: the upper 16 bits of an IEEE fp32.
inline float bf16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// Round to nearest even; NaN stays NaN.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace tetra
