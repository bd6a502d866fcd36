// CUDA partial sum (runtime/ops.h sum_partials): out[M, C] = Σ_s parts[s] + b + residual for
// parts [S, M, C], fp32 or bf16. Each thread takes V consecutive elements of one row (V = 8: one
// or two 16-byte vectors when C % 8 == 0 and every pointer is 16-byte aligned, else V = 1) and
// adds, in fp32 and in this order, parts[0], parts[1], …, parts[S−1], b, the residual, rounding
// once at the store: the additions of the CPU twin (runtime/cpu/partial_sum.cpp), so both give the
// same bits. Bandwidth bound: (S + 1 or 2) · M·C elements moved.
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"

namespace tetra::cuda {

namespace {

template <int V, class T, class TB>
__global__ void sum_partials_kernel(T* out, const T* parts, const TB* bias, const T* residual, int64_t S, int64_t n,
                                    int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
    float acc[V], v[V];
    if (S > 0) {
      load_vec<V>(parts + i, acc);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] = 0.0f;
    }
    for (int64_t s = 1; s < S; ++s) {
      load_vec<V>(parts + s * n + i, v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += v[j];
    }
    if (bias) {
      load_vec<V>(bias + i % C, v);  // V = 8 only when C % 8 == 0: the V columns are in one row
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += v[j];
    }
    if (residual) {
      load_vec<V>(residual + i, v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += v[j];
    }
    store_vec<V>(out + i, acc);
  }
}

}  // namespace

void sum_partials(Tensor& out, const Tensor& parts, const Tensor& b, const Tensor* residual) {
  const char* op = "sum_partials";
  check_cuda_float(op, "out", out);
  check_cuda_float(op, "parts", parts);
  check_dtype(op, "parts", parts, out.dtype());
  if (out.ndim() != 2 || parts.ndim() != 3 || parts.dim(1) != out.dim(0) || parts.dim(2) != out.dim(1))
    TETRA_FAIL(Internal, op, ": parts must be [S, M, C] and out [M, C], got ", parts.describe(), " and ",
               out.describe());
  const int64_t S = parts.dim(0), M = out.dim(0), C = out.dim(1);
  if (b.defined()) {
    check_cuda_float(op, "b", b);
    check_shape(op, "b", b, {C});
  }
  const bool with_res = residual != nullptr && residual->defined();
  if (with_res) {
    check_cuda_float(op, "residual", *residual);
    check_dtype(op, "residual", *residual, out.dtype());
    check_shape(op, "residual", *residual, out.shape());
    check_same_or_disjoint(op, "residual", out, *residual);
  }
  check_disjoint(op, "parts", out, parts);
  const int64_t n = M * C;
  if (n == 0) return;
  const Device dev = out.device();
  DeviceScope scope(dev);
  dispatch_float(out.dtype(), op, "out", [&](auto to) {
    using T = decltype(to);
    auto launch = [&](auto tb, const void* bias_ptr) {
      using TB = decltype(tb);
      T* o = static_cast<T*>(out.data_ptr());
      const T* p = static_cast<const T*>(parts.data_ptr());
      const TB* bp = static_cast<const TB*>(bias_ptr);
      const T* r = with_res ? static_cast<const T*>(residual->data_ptr()) : nullptr;
      const bool vec = C % 8 == 0 && aligned16(o) && aligned16(p) && (!bp || aligned16(bp)) && (!r || aligned16(r));
      const int threads = 256;
      cudaStream_t s = stream_of(dev);
      if (vec)
        sum_partials_kernel<8, T, TB><<<grid_size(n / 8, threads, dev), threads, 0, s>>>(o, p, bp, r, S, n, C);
      else
        sum_partials_kernel<1, T, TB><<<grid_size(n, threads, dev), threads, 0, s>>>(o, p, bp, r, S, n, C);
      TETRA_CUDA_CHECK_LAUNCH();
    };
    if (b.defined()) dispatch_float(b.dtype(), op, "b", [&](auto tb) { launch(tb, b.data_ptr()); });
    else launch(T{}, nullptr);
  });
}

}  // namespace tetra::cuda
