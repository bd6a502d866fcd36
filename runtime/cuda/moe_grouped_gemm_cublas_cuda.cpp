// The grouped expert GEMMs through cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx, cuBLAS ≥ 12.5),
// for comparison with tetra's own kernel (runtime/cuda/moe_grouped_gemm.h). cuBLAS takes each group's
// m, n, k on the host, so this path copies the offsets to the host and waits for them: one host
// synchronisation per call, which stalls the host's run-ahead and cannot be captured into a CUDA
// graph (it fails during a capture). Operands and output of one type (bf16 or fp32), fp32 compute.
// Row-major problems in cuBLAS's column-major terms (as runtime/cuda/linear.cu maps them):
//   Forward         yᵀ[O, m]  = (w[g] as col-major [I, O])ᵀ · (x rows as [I, m])     T, N; m_c = O, n = m, k = I
//   BackwardInput   dxᵀ[I, m] = (w[g] as [I, O]) · (dy rows as [O, m])               N, N; m_c = I, n = m, k = O
//   BackwardWeight  dwᵀ[I, O] = (x rows as [I, m]) · (dy rows as [O, m])ᵀ            N, T; m_c = I, n = O, k = m
#include <cublas_v2.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/moe_grouped_gemm.h"
#include "runtime/error.h"

#define TETRA_CUBLAS_CALL(call)                                                                              \
  do {                                                                                                       \
    cublasStatus_t tetra_st_ = (call);                                                                       \
    if (tetra_st_ != CUBLAS_STATUS_SUCCESS)                                                                  \
      TETRA_FAIL(Device, #call " failed: ", cublasGetStatusName(tetra_st_), " (", cublasGetStatusString(tetra_st_), \
                 ")");                                                                                       \
  } while (0)

namespace tetra::cuda {

namespace {

// One cuBLAS handle per device, made on first use and kept for the process.
cublasHandle_t handle_for(Device device) {
  static std::mutex mu;
  static std::map<int, cublasHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(device.index);
  if (it != handles.end()) return it->second;
  cublasHandle_t h = nullptr;
  TETRA_CUBLAS_CALL(cublasCreate(&h));
  handles[device.index] = h;
  return h;
}

}  // namespace

void grouped_gemm_cublas(const GroupedGemm& p, Device device, cudaStream_t stream) {
  if (p.ab_type != p.c_type)
    TETRA_FAIL(Internal, p.op, " (cuBLAS): the output must have the operands' type here, got ",
               dtype_name(p.ab_type), " operands and a ", dtype_name(p.c_type), " output (TETRA_MOE_GEMM=auto takes it)");
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TETRA_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone)
    TETRA_FAIL(Internal, p.op, " (cuBLAS) reads the group sizes on the host and cannot run inside a CUDA graph ",
               "capture; set TETRA_MOE_GEMM=auto");
  std::vector<int32_t> off(static_cast<size_t>(p.G + 1));
  TETRA_CUDA_CHECK(cudaMemcpyAsync(off.data(), p.offsets, off.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  TETRA_CUDA_CHECK(cudaStreamSynchronize(stream));

  const size_t elem = p.ab_type == DType::BF16 ? 2 : 4;
  const cudaDataType_t type = p.ab_type == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  auto at = [&](const void* base, int64_t elems) {
    return static_cast<const void*>(static_cast<const char*>(base) + static_cast<size_t>(elems) * elem);
  };
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int64_t> m, n, k, lda, ldb, ldc, sizes;
  std::vector<float> alpha, beta;
  std::vector<const void*> A, B;
  std::vector<void*> C;
  for (int64_t g = 0; g < p.G; ++g) {
    int64_t r0 = std::clamp<int64_t>(off[static_cast<size_t>(g)], 0, p.R);
    int64_t r1 = std::clamp<int64_t>(off[static_cast<size_t>(g + 1)], r0, p.R);
    const int64_t rows = r1 - r0;
    const int64_t w = g * p.O * p.I;
    switch (p.kind) {
      case GroupedGemmKind::Forward:
        if (rows == 0) continue;
        ta.push_back(CUBLAS_OP_T), tb.push_back(CUBLAS_OP_N);
        m.push_back(p.O), n.push_back(rows), k.push_back(p.I), lda.push_back(p.I), ldb.push_back(p.I), ldc.push_back(p.O);
        A.push_back(at(p.b, w)), B.push_back(at(p.a, r0 * p.I)), C.push_back(const_cast<void*>(at(p.c, r0 * p.O)));
        break;
      case GroupedGemmKind::BackwardInput:
        if (rows == 0) continue;
        ta.push_back(CUBLAS_OP_N), tb.push_back(CUBLAS_OP_N);
        m.push_back(p.I), n.push_back(rows), k.push_back(p.O), lda.push_back(p.I), ldb.push_back(p.O), ldc.push_back(p.I);
        A.push_back(at(p.b, w)), B.push_back(at(p.a, r0 * p.O)), C.push_back(const_cast<void*>(at(p.c, r0 * p.I)));
        break;
      case GroupedGemmKind::BackwardWeight:
        if (rows == 0) {
          if (!p.accumulate)
            TETRA_CUDA_CHECK(cudaMemsetAsync(const_cast<void*>(at(p.c, w)), 0, static_cast<size_t>(p.O * p.I) * elem, stream));
          continue;
        }
        ta.push_back(CUBLAS_OP_N), tb.push_back(CUBLAS_OP_T);
        m.push_back(p.I), n.push_back(p.O), k.push_back(rows), lda.push_back(p.I), ldb.push_back(p.O), ldc.push_back(p.I);
        A.push_back(at(p.b, r0 * p.I)), B.push_back(at(p.a, r0 * p.O)), C.push_back(const_cast<void*>(at(p.c, w)));
        break;
    }
    alpha.push_back(1.0f);
    beta.push_back(p.kind == GroupedGemmKind::BackwardWeight && p.accumulate ? 1.0f : 0.0f);
    sizes.push_back(1);
  }
  if (sizes.empty()) return;
  // The pointer arrays live on the device. A copy from pageable memory has read the host array when
  // cudaMemcpyAsync returns, so `all` may go out of scope after it.
  const size_t count = sizes.size();
  void* dev_ptrs = nullptr;
  TETRA_CUDA_CHECK(cudaMallocAsync(&dev_ptrs, 3 * count * sizeof(void*), stream));
  std::vector<const void*> all(3 * count);
  for (size_t i = 0; i < count; ++i) all[i] = A[i], all[count + i] = B[i], all[2 * count + i] = C[i];
  TETRA_CUDA_CHECK(cudaMemcpyAsync(dev_ptrs, all.data(), all.size() * sizeof(void*), cudaMemcpyHostToDevice, stream));
  auto** dA = static_cast<const void**>(dev_ptrs);
  auto** dC = static_cast<void**>(dev_ptrs) + 2 * count;
  cublasHandle_t h = handle_for(device);
  TETRA_CUBLAS_CALL(cublasSetStream(h, stream));
  TETRA_CUBLAS_CALL(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  TETRA_CUBLAS_CALL(cublasGemmGroupedBatchedEx_64(
      h, ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(), dA, type, lda.data(), dA + count, type,
      ldb.data(), beta.data(), dC, type, ldc.data(),
      static_cast<int64_t>(count), sizes.data(), CUBLAS_COMPUTE_32F));
  TETRA_CUDA_CHECK(cudaFreeAsync(dev_ptrs, stream));
}

}  // namespace tetra::cuda
