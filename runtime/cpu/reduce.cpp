// CPU reductions, summed in double so that millions of small terms do not lose precision:
// sum_squares (acc[1] fp32 or fp64 += Σ x², for gradient-norm clipping), sum_accumulate (acc[1]
// fp64 += Σ x, the step's loss sum) and sum_to_host (Σ x as a double).
#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"

namespace tetra::cpu {

void sum_squares(Tensor& acc, const Tensor& x) {
  const char* op = "sum_squares";
  if (acc.dtype() != DType::F64) check_dtype(op, "acc", acc, DType::F32);
  check_shape(op, "acc", acc, {1});
  check_float(op, "x", x);
  const int64_t n = x.numel();
  double s = 0.0;
  if (x.dtype() == DType::F32) {
    const float* p = x.data<float>();
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(p[i]) * p[i];
  } else {
    const uint16_t* p = x.bf16_bits();
    for (int64_t i = 0; i < n; ++i) {
      const double f = bf16_to_float(p[i]);
      s += f * f;
    }
  }
  if (acc.dtype() == DType::F64) {
    acc.data<double>()[0] += s;
  } else {
    float* a = acc.data<float>();
    a[0] = static_cast<float>(static_cast<double>(a[0]) + s);
  }
}

void sum_accumulate(Tensor& acc, const Tensor& x) {
  const char* op = "sum_accumulate";
  check_dtype(op, "acc", acc, DType::F64);
  check_shape(op, "acc", acc, {1});
  if (x.dtype() != DType::F64) check_float(op, "x", x);
  acc.data<double>()[0] += sum_to_host(x);
}

double sum_to_host(const Tensor& x) {
  if (!x.defined()) TETRA_FAIL(Internal, "sum_to_host: x is an undefined tensor");
  const int64_t n = x.numel();
  double s = 0.0;
  switch (x.dtype()) {
    case DType::F32: {
      const float* p = x.data<float>();
      for (int64_t i = 0; i < n; ++i) s += p[i];
      break;
    }
    case DType::BF16: {
      const uint16_t* p = x.bf16_bits();
      for (int64_t i = 0; i < n; ++i) s += bf16_to_float(p[i]);
      break;
    }
    case DType::F64: {
      const double* p = x.data<double>();
      for (int64_t i = 0; i < n; ++i) s += p[i];
      break;
    }
    case DType::I32: {
      const int32_t* p = x.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) s += p[i];
      break;
    }
    case DType::I64: {
      const int64_t* p = x.data<int64_t>();
      for (int64_t i = 0; i < n; ++i) s += static_cast<double>(p[i]);
      break;
    }
    default:
      TETRA_FAIL(Internal, "sum_to_host: unsupported dtype of ", x.describe(),
                 " (supported: fp32, bf16, fp64, int32, int64)");
  }
  return s;
}

}  // namespace tetra::cpu
