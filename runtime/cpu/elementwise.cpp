// CPU elementwise and memory ops: fill, zero, copy (with fp32 <-> bf16 conversion), copy_columns,
// add, add_bias, scale.
// fp32 and bf16 tensors are accepted; arithmetic happens in fp32.
#include <algorithm>
#include <cstring>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

void fill(Tensor& x, float value) {
  check_float("fill", "x", x);
  if (x.dtype() == DType::F32) {
    std::fill_n(x.data<float>(), x.numel(), value);
  } else {
    std::fill_n(x.bf16_bits(), x.numel(), float_to_bf16(value));
  }
}

// All-zero bits are zero in every dtype tetra has, so zero works for any tensor.
void zero(Tensor& x) {
  if (!x.defined()) TETRA_FAIL(Internal, "zero: x is an undefined tensor");
  if (x.nbytes() > 0) std::memset(x.data_ptr(), 0, x.nbytes());
}

// Row by row, one memcpy each (shapes, dtypes and ranges checked by ops::copy_columns).
void copy_columns(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t cols) {
  const size_t es = dtype_size(dst.dtype());
  char* d = static_cast<char*>(dst.data_ptr());
  const char* s = static_cast<const char*>(src.data_ptr());
  const int64_t dw = dst.dim(1), sw = src.dim(1);
  for (int64_t n = 0; n < dst.dim(0); ++n)
    std::memcpy(d + (n * dw + dst_col) * es, s + (n * sw + src_col) * es, static_cast<size_t>(cols) * es);
}

// dst = src element by element (shapes may differ, element counts may not). Same dtype: a byte
// copy (memmove: overlapping views are fine). fp32 <-> bf16: converted, round to nearest even.
void copy(Tensor& dst, const Tensor& src) {
  if (!dst.defined() || !src.defined())
    TETRA_FAIL(Internal, "copy: ", src.describe(), " into ", dst.describe(), ": both must be defined");
  if (dst.numel() != src.numel())
    TETRA_FAIL(Internal, "copy: ", src.describe(), " into ", dst.describe(), ": element counts differ");
  if (dst.dtype() == src.dtype()) {
    if (dst.nbytes() > 0) std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    return;
  }
  const bool floats = (dst.dtype() == DType::F32 || dst.dtype() == DType::BF16) &&
                      (src.dtype() == DType::F32 || src.dtype() == DType::BF16);
  if (!floats)
    TETRA_FAIL(Internal, "copy: cannot convert ", src.describe(), " into ", dst.describe(),
               " (only fp32 <-> bf16 conversions are supported; use matching dtypes otherwise)");
  const int64_t n = dst.numel();
  if (dst.dtype() == DType::BF16) {
    const float* s = src.data<float>();
    uint16_t* d = dst.bf16_bits();
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]);
  } else {
    const uint16_t* s = src.bf16_bits();
    float* d = dst.data<float>();
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_float(s[i]);
  }
}

// y = a + b, all of one shape; y may alias a or b (each element is read before it is written).
void add(Tensor& y, const Tensor& a, const Tensor& b) {
  check_float("add", "y", y);
  check_float("add", "a", a);
  check_float("add", "b", b);
  check_shape("add", "a", a, y.shape());
  check_shape("add", "b", b, y.shape());
  const int64_t n = y.numel();
  if (y.dtype() == DType::F32 && a.dtype() == DType::F32 && b.dtype() == DType::F32) {
    float* py = y.data<float>();
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    for (int64_t i = 0; i < n; ++i) py[i] = pa[i] + pb[i];
    return;
  }
  FloatReader ra(a), rb(b);
  FloatWriter wy(y);
  for (int64_t i = 0; i < n; ++i) wy.set(i, ra[i] + rb[i]);
}

void add_bias(Tensor& y, const Tensor& b) {
  check_float("add_bias", "y", y);
  check_float("add_bias", "b", b);
  const int64_t C = b.numel(), n = y.numel();
  FloatReader ry(y), rb(b);
  FloatWriter wy(y);
  for (int64_t i = 0; i < n; ++i) wy.set(i, ry[i] + rb[i % C]);
}

void scale(Tensor& x, float s) {
  check_float("scale", "x", x);
  const int64_t n = x.numel();
  if (x.dtype() == DType::F32) {
    float* p = x.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] *= s;
    return;
  }
  FloatReader r(x);
  FloatWriter w(x);
  for (int64_t i = 0; i < n; ++i) w.set(i, r[i] * s);
}

}  // namespace tetra::cpu
