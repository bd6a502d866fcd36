// FP8 codes on the host: decoding from the bit fields, encoding by a search over the 127 finite
// non-negative codes (which are ordered like their values), so ties-to-even is "the even code".
#include "runtime/fp8_format.h"

#include <array>
#include <cmath>

#include "runtime/error.h"

namespace tetra {

namespace {

struct FormatBits {
  int exponent_bits, mantissa_bits, bias;
  uint8_t largest_code;  // the largest finite magnitude
};

FormatBits bits_of(Fp8Format f) {
  return f == Fp8Format::E4M3 ? FormatBits{4, 3, 7, 0x7E} : FormatBits{5, 2, 15, 0x7B};
}

// The magnitudes of codes 0 ..= largest_code, increasing.
struct MagnitudeTable {
  std::array<float, 128> value{};
  int count = 0;
  explicit MagnitudeTable(Fp8Format f) {
    count = bits_of(f).largest_code + 1;
    for (int c = 0; c < count; ++c) value[c] = fp8_to_float(static_cast<uint8_t>(c), f);
  }
};

const MagnitudeTable& table(Fp8Format f) {
  static const MagnitudeTable e4m3(Fp8Format::E4M3), e5m2(Fp8Format::E5M2);
  return f == Fp8Format::E4M3 ? e4m3 : e5m2;
}

}  // namespace

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }

Fp8Format fp8_format_of(DType t) {
  if (t == DType::F8E4M3) return Fp8Format::E4M3;
  if (t == DType::F8E5M2) return Fp8Format::E5M2;
  TETRA_FAIL(Internal, "dtype ", dtype_name(t), " is not an FP8 format");
}

DType dtype_of(Fp8Format f) { return f == Fp8Format::E4M3 ? DType::F8E4M3 : DType::F8E5M2; }

float fp8_to_float(uint8_t code, Fp8Format f) {
  const FormatBits b = bits_of(f);
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  const int exponent = (code >> b.mantissa_bits) & ((1 << b.exponent_bits) - 1);
  const int mantissa = code & ((1 << b.mantissa_bits) - 1);
  const int max_exponent = (1 << b.exponent_bits) - 1;
  if (f == Fp8Format::E4M3 && exponent == max_exponent && mantissa == (1 << b.mantissa_bits) - 1) return NAN;
  if (f == Fp8Format::E5M2 && exponent == max_exponent) return mantissa ? NAN : sign * INFINITY;
  const float scale = static_cast<float>(1 << b.mantissa_bits);
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa) / scale, 1 - b.bias);  // subnormal
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / scale, exponent - b.bias);
}

uint8_t fp8_from_float(float x, Fp8Format f) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  const MagnitudeTable& t = table(f);
  if (a >= t.value[t.count - 1]) return sign | static_cast<uint8_t>(t.count - 1);  // saturate (inf too)
  // The largest code whose magnitude is ≤ a; a lies in [value[lo], value[lo + 1]).
  int lo = 0, hi = t.count - 1;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (t.value[mid] <= a ? lo : hi) = mid;
  }
  // The midpoint of two neighbouring FP8 values is exact in fp32 (FP8 has 3 mantissa bits at most).
  const float mid = 0.5f * (t.value[lo] + t.value[lo + 1]);
  int code = a < mid ? lo : a > mid ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return sign | static_cast<uint8_t>(code);
}

}  // namespace tetra
