// cuBLASLt matmuls for the dense layers: one handle per device, a 32 MiB workspace per (device,
// stream) allocated on first use and kept, and the heuristic's algorithm cached per problem (shape,
// types, epilogue, and the alignment of every pointer, which the algorithm choice depends on).
// Compute is always fp32 (CUBLAS_COMPUTE_32F, never TF32), so fp32 GEMMs are exact to fp32 rounding.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/device.h"

namespace tetra::cuda {

// One column-major problem, as cuBLASLt sees it:
//   D[m, n] = alpha · op(A)[m, k] · op(B)[k, n] + beta · D[m, n]      (C is D: same pointer, same layout)
// A is stored [m, k] (lda ≥ m) when !trans_a, else [k, m] (lda ≥ k); B is [k, n] or [n, k] likewise;
// D is [m, n] with ldd ≥ m. A and B share one type (fp32 or bf16); D is that type or fp32.
struct LtProblem {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  cudaDataType_t ab_type = CUDA_R_32F, d_type = CUDA_R_32F;
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  float alpha = 1.0f, beta = 0.0f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  // BIAS / GELU_BIAS / GELU_AUX_BIAS: the bias [m] (read). BGRADA: bias gradient [m] (written);
  // BGRADB: bias gradient [n] (written). Same type as D.
  const void* bias = nullptr;
  // GELU_AUX(_BIAS): the pre-activation output [m, n], column-major with leading dimension aux_ld
  // (a multiple of 8, ≥ m), same type as D.
  void* aux = nullptr;
  int64_t aux_ld = 0;
};

// Runs the problem on `stream` (a stream of `device`, which must be current). Returns false, having
// done nothing, when cuBLASLt offers no algorithm for it (an epilogue it cannot fuse for these
// types, sizes or alignments), so the caller can take an unfused path. Any other failure throws.
bool lt_matmul(const LtProblem& p, Device device, cudaStream_t stream);

}  // namespace tetra::cuda
