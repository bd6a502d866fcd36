// CUDA FP8 GEMM (runtime/ops.h) through cuBLASLt (runtime/cuda/cublaslt.h). Row-major
// y[M, N] = a[M, K] · b[N, K]ᵀ is, column-major, D[N, M] = op_T(b) · a with both operands stored
// K-contiguous: the "TN" layout that Hopper's FP8 GEMMs require. cuBLASLt's A is b and its B is a;
// each operand's scale goes with it:
//   Tensorwise → SCALAR_32F (one fp32 on the device), Rows1x128 → VEC128_32F ([⌈K/128⌉, rows], a
//   scale per 128 K-elements of a row, the rows contiguous), Blocks128 → BLK128x128_32F
//   ([⌈rows/128⌉, ⌈K/128⌉], the K blocks contiguous).
// Partial sums are promoted to fp32 (no fast accumulation, as DeepSeek-V3's recipe does) unless the
// caller asks for fast accumulation (tensorwise only).
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/fp8_cast_shape.h"

namespace tetra::cuda {

namespace {

cudaDataType_t cuda_fp8_type(DType t) { return t == DType::F8E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

int32_t scale_mode(ops::Fp8Scaling s) {
  switch (s) {
    case ops::Fp8Scaling::Tensorwise: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case ops::Fp8Scaling::Rows1x128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case ops::Fp8Scaling::Blocks128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

}  // namespace

void fp8_gemm(Tensor& y, const Tensor& a, const Tensor& a_scale, ops::Fp8Scaling a_scaling, const Tensor& b,
              const Tensor& b_scale, ops::Fp8Scaling b_scaling, bool accumulate, bool fast_accum) {
  const char* op = "fp8_gemm";
  check_cuda_tensor(op, "y", y);
  check_cuda_tensor(op, "a", a);
  check_cuda_tensor(op, "b", b);
  const Fp8GemmShape s = fp8_gemm_shape(op, y, a, a_scale, a_scaling, b, b_scale, b_scaling);
  if (s.m % 16 || s.n % 16 || s.k % 16)
    TETRA_FAIL(Internal, op, ": cuBLASLt's FP8 GEMMs need M, N and K multiples of 16, got M ", s.m, ", N ", s.n,
               ", K ", s.k);
  if (a.dtype() == DType::F8E5M2 && b.dtype() == DType::F8E5M2)
    TETRA_FAIL(Internal, op, ": both operands E5M2 (Hopper multiplies E4M3·E4M3, E4M3·E5M2 and E5M2·E4M3)");
  const Device dev = y.device();
  DeviceScope scope(dev);
  LtProblem p;
  p.trans_a = true;
  p.trans_b = false;
  p.m = s.n;
  p.n = s.m;
  p.k = s.k;
  p.lda = s.k;
  p.ldb = s.k;
  p.ldd = s.n;
  p.ab_type = cuda_fp8_type(b.dtype());
  p.b_fp8_type = cuda_fp8_type(a.dtype());
  p.d_type = y.dtype() == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  p.a = b.data_ptr();
  p.b = a.data_ptr();
  p.d = y.data_ptr();
  p.beta = accumulate ? 1.0f : 0.0f;
  p.a_scale = b_scale.data<float>();
  p.b_scale = a_scale.data<float>();
  p.a_scale_mode = scale_mode(b_scaling);
  p.b_scale_mode = scale_mode(a_scaling);
  p.fast_accum = fast_accum;
  if (!lt_matmul(p, dev, stream_of(dev)))
    TETRA_FAIL(Device, op, ": cuBLASLt offers no FP8 algorithm for y[", s.m, ", ", s.n, "] = a[", s.m, ", ", s.k,
               "] (", dtype_name(a.dtype()), ") · b[", s.n, ", ", s.k, "]ᵀ (", dtype_name(b.dtype()),
               ") with these scalings");
}

}  // namespace tetra::cuda
