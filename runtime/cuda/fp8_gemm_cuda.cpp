// CUDA FP8 GEMM (runtime/ops.h) through cuBLASLt (runtime/cuda/cublaslt.h). Row-major
// y[M, N] = a[M, K] · b[N, K]ᵀ is, column-major, D[N, M] = op_T(b) · a with both operands stored
// K-contiguous: the "TN" layout that Hopper's FP8 GEMMs require. cuBLASLt's A is b and its B is a;
// each operand's scale goes with it:
//   Tensorwise → SCALAR_32F (one fp32 on the device), Rows1x128 → VEC128_32F ([⌈K/128⌉, rows], a
//   scale per 128 K-elements of a row, the rows contiguous), Blocks128 → BLK128x128_32F
//   ([⌈rows/128⌉, ⌈K/128⌉], the K blocks contiguous).
// Partial sums are promoted to fp32 (no fast accumulation, as DeepSeek-V3's recipe does) unless the
// caller asks for fast accumulation (tensorwise only).
// The epilogue (ops::Fp8Epilogue) in column-major terms: the bias [N] runs along D's rows
// (CUBLASLT_EPILOGUE_BIAS; a bf16 bias, as cuBLASLt's FP8 GEMMs take it with a bf16 or fp32 D), the
// residual is C (D's layout, beta = 1; C = D when y is the residual), the GELU forward is GELU_AUX(_BIAS)
// with the pre-activation as aux ([N, M] column-major, ld N) and DGELU reads it there. Where cuBLASLt
// offers no fused algorithm (lt_matmul returns false), the product lands in y (or the pre-activation)
// and the bias, GELU and amax run as the ops do (add_bias, gelu_forward / gelu_backward with their amax).
#include <cstdlib>
#include <sstream>
#include <string>

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

// Which epilogues the FP8 GEMMs hand to cuBLASLt: the environment variable TETRA_FP8_FUSE, a
// comma-separated subset of bias, gelu (GELU_AUX, with the bias where there is one) and dgelu; "all":
// every one; "none": the unfused ops after a plain GEMM (the residual is C either way). Unset: bias
// and gelu. cuBLASLt's FP8 GEMMs with DGELU ran GPT-2 1.3B's step 20 ms slower on one H200 than the
// plain GEMM and gelu_backward (docs/kernels.md "FP8 training"). Anything else fails at the first GEMM.
struct FusedKinds {
  bool bias = true, gelu = true, dgelu = false;
};

FusedKinds parse_fused_kinds(const char* v) {
  if (!v) return {};
  if (std::string(v) == "all") return {true, true, true};
  FusedKinds k{false, false, false};
  if (std::string(v) == "none") return k;
  std::stringstream list(v);
  for (std::string item; std::getline(list, item, ',');) {
    if (item == "bias") k.bias = true;
    else if (item == "gelu") k.gelu = true;
    else if (item == "dgelu") k.dgelu = true;
    else TETRA_FAIL(Config, "TETRA_FP8_FUSE=", v, ": '", item, "' is not bias, gelu or dgelu (or all, none)");
  }
  return k;
}

const FusedKinds& fused_kinds() {
  static const FusedKinds kinds = parse_fused_kinds(std::getenv("TETRA_FP8_FUSE"));
  return kinds;
}

// The fused epilogue, or false (nothing done) where cuBLASLt has no algorithm for it or
// TETRA_FP8_FUSE leaves it to the ops.
bool fused_epilogue(const LtProblem& p, const ops::Fp8Epilogue& e, Device dev) {
  const FusedKinds& fuse = fused_kinds();
  if (e.gelu_pre ? !fuse.gelu : e.dgelu_pre ? !fuse.dgelu : !fuse.bias) return false;
  LtProblem f = p;
  const int64_t n = p.m;  // y's columns: D's rows
  if (e.gelu_pre || e.dgelu_pre) {
    // bf16 y only, as linear_forward fuses GELU (an fp32 y keeps gelu_forward's exact tanhf); the aux
    // leading dimension a multiple of 8.
    if (p.d_type != CUDA_R_16BF || n % 8 != 0) return false;
    f.aux = e.gelu_pre ? e.gelu_pre->data_ptr() : const_cast<void*>(e.dgelu_pre->data_ptr());  // DGELU only reads it
    f.aux_ld = n;
  }
  if (e.bias) {
    f.bias = e.bias->data_ptr();
    f.bias_type = e.bias->dtype() == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  }
  if (e.gelu_pre) f.epilogue = e.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  else if (e.dgelu_pre) f.epilogue = CUBLASLT_EPILOGUE_DGELU;
  else if (e.bias) f.epilogue = CUBLASLT_EPILOGUE_BIAS;
  else return false;  // a residual alone is p itself
  return lt_matmul(f, dev, stream_of(dev));
}

void no_algorithm(const char* op, const Fp8GemmShape& s, const Tensor& a, const Tensor& b) {
  TETRA_FAIL(Device, op, ": cuBLASLt offers no FP8 algorithm for y[", s.m, ", ", s.n, "] = a[", s.m, ", ", s.k, "] (",
             dtype_name(a.dtype()), ") · b[", s.n, ", ", s.k, "]ᵀ (", dtype_name(b.dtype()), ") with these scalings");
}

}  // namespace

void fp8_gemm(Tensor& y, const Tensor& a, const Tensor& a_scale, ops::Fp8Scaling a_scaling, const Tensor& b,
              const Tensor& b_scale, ops::Fp8Scaling b_scaling, bool accumulate, bool fast_accum,
              const ops::Fp8Epilogue& e) {
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
  p.beta = accumulate || e.residual ? 1.0f : 0.0f;
  p.c = e.residual ? e.residual->data_ptr() : nullptr;  // y itself when in place
  p.a_scale = b_scale.data<float>();
  p.b_scale = a_scale.data<float>();
  p.a_scale_mode = scale_mode(b_scaling);
  p.b_scale_mode = scale_mode(a_scaling);
  p.fast_accum = fast_accum;
  if (s.m == 0 || s.n == 0) {  // nothing to write; the amax of an empty y is 0
    if (e.amax) fp8_amax(*e.amax, y);
    return;
  }
  if (fused_epilogue(p, e, dev)) {
    // One read of y: the amax of the stored values, as the CPU twin's (that cuBLASLt's
    // AMAX_D_POINTER gives the same bits for a bf16 D is not verified).
    if (e.amax) fp8_amax(*e.amax, y);
    return;
  }
  // Unfused: the product (plus the residual) into y, or into the pre-activation under a GELU forward.
  Tensor& z = e.gelu_pre ? *e.gelu_pre : y;
  p.d = z.data_ptr();
  if (!lt_matmul(p, dev, stream_of(dev))) {
    if (!e.residual || e.residual->data_ptr() == y.data_ptr()) no_algorithm(op, s, a, b);
    copy(y, *e.residual);  // C distinct from D has no algorithm here: accumulate onto a copy
    p.c = nullptr;
    if (!lt_matmul(p, dev, stream_of(dev))) no_algorithm(op, s, a, b);
  }
  if (e.bias) add_bias(z, *e.bias);
  if (e.gelu_pre) gelu_forward(y, z, e.amax);
  else if (e.dgelu_pre) gelu_backward(y, y, *e.dgelu_pre, e.amax);
  else if (e.amax) fp8_amax(*e.amax, y);
}

}  // namespace tetra::cuda
