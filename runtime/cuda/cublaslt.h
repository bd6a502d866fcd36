// cuBLASLt matmuls for the dense layers: one handle per device, a 32 MiB workspace per (device,
// stream) allocated on first use and kept, and a plan cached per problem (shape, types, layouts,
// epilogue, whether beta is 0 and whether C is D, and the alignment of every pointer, which the
// algorithm choice depends on). Compute is always fp32 (CUBLAS_COMPUTE_32F, never TF32), so fp32
// GEMMs are exact to fp32 rounding.
//
// Autotuning (TETRA_GEMM_TUNE): the first time a problem runs, the heuristic's best algorithms (up
// to 16) are each timed on the problem's own operands A and B with scratch outputs (never the
// caller's D, C, aux or bias-gradient buffers), and the fastest is kept for the rest of the
// process. The heuristic's first choice stays unless another is at least 1% faster. Tuning
// synchronises the stream a few times, so it belongs in the first (warm-up) step; it never runs
// while the stream is being captured into a CUDA graph (that call takes the heuristic's choice and
// the problem is tuned at its next uncaptured call): capture graphs after one warm-up step.
// Algorithm choices are timing-dependent, so two processes may pick different algorithms (and round
// differently); TETRA_GEMM_TUNE=0 makes the choice the heuristic's, the same in every run.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/device.h"

namespace tetra::cuda {

// One column-major problem, as cuBLASLt sees it:
//   D[m, n] = alpha · op(A)[m, k] · op(B)[k, n] + beta · C[m, n]
// A is stored [m, k] (lda ≥ m) when !trans_a, else [k, m] (lda ≥ k); B is [k, n] or [n, k] likewise;
// D is [m, n] with ldd ≥ m. A and B share one type (fp32 or bf16); D is that type or fp32.
// C has D's type and leading dimension: c == nullptr (or c == d) means C is D itself (in place,
// accumulate); otherwise c is a separate buffer, only read (e.g. the residual added to a projection).
struct LtProblem {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  cudaDataType_t ab_type = CUDA_R_32F, d_type = CUDA_R_32F;
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  const void* c = nullptr;  // read only when beta ≠ 0
  float alpha = 1.0f, beta = 0.0f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  // BIAS / GELU_BIAS / GELU_AUX_BIAS: the bias [m] (read). BGRADA: bias gradient [m] (written);
  // BGRADB: bias gradient [n] (written). Of bias_type, a cudaDataType_t; -1: D's type (an FP8 GEMM
  // with an fp32 D takes a bf16 bias).
  const void* bias = nullptr;
  int bias_type = -1;
  cudaDataType_t bias_lt_type() const { return bias_type < 0 ? d_type : static_cast<cudaDataType_t>(bias_type); }
  // GELU_AUX(_BIAS): the pre-activation output [m, n], column-major with leading dimension aux_ld
  // (a multiple of 8, ≥ m), same type as D. DGELU: the same layout, read (the forward's pre-activation).
  void* aux = nullptr;
  int64_t aux_ld = 0;
  // FP8 operands (Hopper): ab_type is A's FP8 type (CUDA_R_8F_E4M3 / _E5M2) and b_fp8_type B's; both
  // need trans_a and !trans_b (the "TN" layout, K contiguous in both). a_scale / b_scale: device fp32
  // dequantisation scales under a_scale_mode / b_scale_mode (CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
  // _VEC128_32F or _BLK128x128_32F). Null scales: not an FP8 problem.
  cudaDataType_t b_fp8_type = CUDA_R_8F_E4M3;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  int32_t a_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t b_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  bool fast_accum = false;  // CUBLASLT_MATMUL_DESC_FAST_ACCUM (scalar scales only)
  bool fp8() const { return a_scale != nullptr; }
  cudaDataType_t b_type() const { return fp8() ? b_fp8_type : ab_type; }
};

// Runs the problem on `stream` (a stream of `device`, which must be current). Returns false, having
// done nothing, when cuBLASLt offers no algorithm for it (an epilogue it cannot fuse for these
// types, sizes or alignments), so the caller can take an unfused path. Any other failure throws.
bool lt_matmul(const LtProblem& p, Device device, cudaStream_t stream);

// Algorithm autotuning. The mode starts from the environment variable TETRA_GEMM_TUNE:
//   unset, "1" or "on"   On: tune each new problem, silently;
//   "verbose"            On, and print one line per tuned problem to stderr (m n k, types,
//                        epilogue, beta, the heuristic's time and the best time);
//   "0" or "off"         Off: the heuristic's first algorithm, as cuBLASLt ranks them.
// Any other value fails at the first GEMM. set_gemm_tuning overrides the mode for the process
// (benchmarks compare both); problems already tuned keep their choice, which Off ignores.
enum class GemmTuning { Off, On, Verbose };
GemmTuning gemm_tuning();
void set_gemm_tuning(GemmTuning mode);

}  // namespace tetra::cuda
