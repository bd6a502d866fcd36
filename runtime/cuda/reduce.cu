// CUDA reductions. All are deterministic: each block sums a fixed share in a fixed order and a
// second pass folds the block partials in block order, so a run reproduces its bits.
//   sum_squares   acc[1] fp32/fp64 += Σ x²        x fp32 or bf16 [n]; fp32 partials
//   sum_accumulate acc[1] fp64 += Σ x              x fp32/bf16/fp64 [n]; fp64 partials, no host sync
//   sum_to_host   Σ x as a double on the host     x fp32/bf16/fp64/int32/int64 [n]; fp64 partials
//   column_sum    out[C] (+)= Σ_r in[r, :]         in [R, C]; fp32 partials [P, C] (P ≤ 256 row groups)
#include <algorithm>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/reduce.h"

namespace tetra::cuda {

namespace {

constexpr int kReduceThreads = 256;
constexpr int kMaxPartials = 1024;  // blocks of the first pass (and threads' share of the second)
constexpr int64_t kDirectFoldRows = 64;  // column_sum of up to this many fp32 rows: the fold kernel alone

__device__ __forceinline__ double to_f64(float x) { return x; }
__device__ __forceinline__ double to_f64(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ double to_f64(double x) { return x; }
__device__ __forceinline__ double to_f64(int32_t x) { return x; }
__device__ __forceinline__ double to_f64(int64_t x) { return static_cast<double>(x); }

// partial[b] = Σ x[i]² over block b's grid-stride share, i < n. V = 8 needs n % 8 == 0, x aligned.
template <int V, class T>
__global__ void sum_squares_partial_kernel(float* partial, const T* x, int64_t n) {
  __shared__ float scratch[32];
  float acc = 0.0f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
    float v[V];
    load_vec<V>(x + i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) acc += v[j] * v[j];
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// acc[0] += Σ_b partial[b], b < count (one block; the fold of the partials is in double).
template <class A>
__global__ void sum_squares_finish_kernel(A* acc, const float* partial, int count) {
  __shared__ double scratch[32];
  double t = 0.0;
  for (int b = threadIdx.x; b < count; b += blockDim.x) t += partial[b];
  t = block_sum(t, scratch);
  if (threadIdx.x == 0) acc[0] = static_cast<A>(static_cast<double>(acc[0]) + t);
}

// partial[b] = Σ x[i] over block b's grid-stride share, in double.
template <class T>
__global__ void sum_partial_kernel(double* partial, const T* x, int64_t n) {
  __shared__ double scratch[32];
  double acc = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) acc += to_f64(x[i]);
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// out[0] = Σ_b partial[b] (one block), or out[0] += it with accumulate.
__global__ void sum_finish_kernel(double* out, const double* partial, int count, bool accumulate = false) {
  __shared__ double scratch[32];
  double t = 0.0;
  for (int b = threadIdx.x; b < count; b += blockDim.x) t += partial[b];
  t = block_sum(t, scratch);
  if (threadIdx.x == 0) out[0] = accumulate ? out[0] + t : t;
}

// partial[p, c] = Σ in[r, c] over the rows r of row group p (r = p·8 + ty + k·P·8).
// Block (32, 8): 32 consecutive columns (coalesced) × 8 row lanes, folded in shared memory.
template <class T>
__global__ void column_partial_kernel(float* partial, const T* in, int64_t R, int64_t C) {
  __shared__ float s[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < C)
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < R; r += static_cast<int64_t>(gridDim.y) * 8)
      acc += to_f32(in[r * C + c]);
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) t += s[j][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * C + c] = t;
  }
}

// The same with 16-byte loads: thread x of a [32, 8] block owns 8 adjacent columns (a warp reads 256
// columns of a row at once), C % 8 == 0 and `in` 16-byte aligned; the 8 warps' sums are folded in
// order through shared memory.
template <class T>
__global__ void column_partial_vec_kernel(float* partial, const T* in, int64_t R, int64_t C) {
  __shared__ float s[8][256];
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * 8;
  float acc[8] = {};
  const int64_t row_step = static_cast<int64_t>(gridDim.y) * 8;
  if (c < C)
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < R; r += row_step) {
      float v[8];
      load_vec<8>(in + r * C + c, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += v[j];
    }
#pragma unroll
  for (int j = 0; j < 8; ++j) s[threadIdx.y][threadIdx.x * 8 + j] = acc[j];
  __syncthreads();
  // 256 threads, one column each: fold the 8 warps' values.
  const int t = threadIdx.y * 32 + threadIdx.x;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 256 + t;
  if (col < C) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < 8; ++w) sum += s[w][t];
    partial[static_cast<int64_t>(blockIdx.y) * C + col] = sum;
  }
}

// out[c] = (accumulate ? out[c] : 0) + Σ_p partial[p, c]. A [32, 8] block per 32 columns: warp y sums
// partials p ≡ y (mod 8) in order, then the 8 warp sums are added in order (fixed, so deterministic).
template <class T>
__global__ void column_finish_kernel(T* out, const float* partial, int P, int64_t C, bool accumulate) {
  __shared__ float s[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float t = 0.0f;
  if (c < C) {
#pragma unroll 8
    for (int p = threadIdx.y; p < P; p += 8) t += partial[static_cast<int64_t>(p) * C + c];
  }
  s[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < 8; ++w) sum += s[w][threadIdx.x];
    out[c] = from_f32<T>((accumulate ? to_f32(out[c]) : 0.0f) + sum);
  }
}

}  // namespace

void sum_squares(Tensor& acc, const Tensor& x) {
  const char* op = "sum_squares";
  check_cuda_tensor(op, "acc", acc);
  if (acc.dtype() != DType::F64) check_dtype(op, "acc", acc, DType::F32);
  check_shape(op, "acc", acc, {1});
  check_cuda_float(op, "x", x);
  const int64_t n = x.numel();
  if (n == 0) return;
  const Device dev = x.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  dispatch_float(x.dtype(), op, "x", [&](auto tx) {
    using T = decltype(tx);
    const T* px = static_cast<const T*>(x.data_ptr());
    const bool vec = n % 8 == 0 && aligned16(px);
    const int64_t items = vec ? n / 8 : n;
    const int blocks = static_cast<int>(std::min<int64_t>(kMaxPartials, (items + kReduceThreads - 1) / kReduceThreads));
    Tensor partial = Tensor::empty({blocks}, DType::F32, dev);
    if (vec)
      sum_squares_partial_kernel<8, T><<<blocks, kReduceThreads, 0, stream>>>(partial.data<float>(), px, n);
    else
      sum_squares_partial_kernel<1, T><<<blocks, kReduceThreads, 0, stream>>>(partial.data<float>(), px, n);
    TETRA_CUDA_CHECK_LAUNCH();
    if (acc.dtype() == DType::F64)
      sum_squares_finish_kernel<double><<<1, kReduceThreads, 0, stream>>>(acc.data<double>(), partial.data<float>(), blocks);
    else
      sum_squares_finish_kernel<float><<<1, kReduceThreads, 0, stream>>>(acc.data<float>(), partial.data<float>(), blocks);
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

namespace {
// out[0] = Σ x (or += with accumulate), on the device's current stream. partial: fp64 scratch of
// at least partial_count(x.numel()) elements.
int partial_count(int64_t n) {
  return static_cast<int>(std::min<int64_t>(kMaxPartials, (n + kReduceThreads - 1) / kReduceThreads));
}
void sum_into(double* out, double* partial, const Tensor& x, bool accumulate, const char* op) {
  const int64_t n = x.numel();
  cudaStream_t stream = stream_of(x.device());
  const int blocks = partial_count(n);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    sum_partial_kernel<T><<<blocks, kReduceThreads, 0, stream>>>(partial, static_cast<const T*>(x.data_ptr()), n);
    TETRA_CUDA_CHECK_LAUNCH();
  };
  switch (x.dtype()) {
    case DType::F32: run(float{}); break;
    case DType::BF16: run(bf16{}); break;
    case DType::F64: run(double{}); break;
    case DType::I32: run(int32_t{}); break;
    case DType::I64: run(int64_t{}); break;
    default:
      TETRA_FAIL(Internal, op, ": unsupported dtype of ", x.describe(), " (supported: fp32, bf16, fp64, int32, int64)");
  }
  sum_finish_kernel<<<1, kReduceThreads, 0, stream>>>(out, partial, blocks, accumulate);
  TETRA_CUDA_CHECK_LAUNCH();
}
}  // namespace

double sum_to_host(const Tensor& x) {
  check_cuda_tensor("sum_to_host", "x", x);
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  const Device dev = x.device();
  DeviceScope scope(dev);
  const int blocks = partial_count(n);
  Tensor partial = Tensor::empty({blocks + 1}, DType::F64, dev);  // [0, blocks): partials; [blocks]: the sum
  double* pp = partial.data<double>();
  sum_into(pp + blocks, pp, x, /*accumulate=*/false, "sum_to_host");
  double result = 0.0;
  copy_bytes(&result, Device::cpu(), pp + blocks, dev, sizeof(double), /*blocking=*/true);
  return result;
}

void sum_accumulate(Tensor& acc, const Tensor& x) {
  const char* op = "sum_accumulate";
  check_cuda_tensor(op, "acc", acc);
  check_dtype(op, "acc", acc, DType::F64);
  check_shape(op, "acc", acc, {1});
  check_cuda_tensor(op, "x", x);
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceScope scope(x.device());
  Tensor partial = Tensor::empty({partial_count(n)}, DType::F64, x.device());
  sum_into(acc.data<double>(), partial.data<double>(), x, /*accumulate=*/true, op);
}

void column_sum(Tensor& out, const Tensor& in, int64_t rows, int64_t cols, bool accumulate) {
  TETRA_CHECK(out.numel() == cols && in.numel() == rows * cols, "column_sum: ", in.describe(), " as [", rows, ", ",
              cols, "] into ", out.describe());
  if (cols == 0) return;
  const Device dev = out.device();
  cudaStream_t stream = stream_of(dev);
  if (in.dtype() == DType::F32 && rows <= kDirectFoldRows) {
    // A few fp32 rows (e.g. a column sum already taken elsewhere): they are the partials; one fold.
    dispatch_float(out.dtype(), "column_sum", "out", [&](auto to) {
      using TO = decltype(to);
      column_finish_kernel<TO><<<static_cast<unsigned>((cols + 31) / 32), dim3(32, 8), 0, stream>>>(
          static_cast<TO*>(out.data_ptr()), in.data<float>(), static_cast<int>(rows), cols, accumulate);
      TETRA_CUDA_CHECK_LAUNCH();
    });
    return;
  }
  const bool vec = cols % 8 == 0 && aligned16(in.data_ptr());
  const int64_t strips = vec ? (cols + 255) / 256 : (cols + 31) / 32;
  // Row groups P: 8 blocks per SM over all strips (fewer are latency-bound: 2.5× slower at one per
  // SM, docs/kernels.md v7), no more than the rows fill (8 per pass), at most 256.
  const int64_t want = (static_cast<int64_t>(sm_count(dev)) * 8 + strips - 1) / strips;
  const int P = static_cast<int>(std::clamp<int64_t>(std::min(want, (rows + 7) / 8), 1, 256));
  Tensor partial = Tensor::empty({P, cols}, DType::F32, dev);
  const dim3 grid(static_cast<unsigned>(strips), static_cast<unsigned>(P));
  dispatch_float(in.dtype(), "column_sum", "in", [&](auto ti) {
    using TI = decltype(ti);
    const TI* pin = static_cast<const TI*>(in.data_ptr());
    if (vec) column_partial_vec_kernel<TI><<<grid, dim3(32, 8), 0, stream>>>(partial.data<float>(), pin, rows, cols);
    else column_partial_kernel<TI><<<grid, dim3(32, 8), 0, stream>>>(partial.data<float>(), pin, rows, cols);
    TETRA_CUDA_CHECK_LAUNCH();
  });
  dispatch_float(out.dtype(), "column_sum", "out", [&](auto to) {
    using TO = decltype(to);
    column_finish_kernel<TO><<<static_cast<unsigned>((cols + 31) / 32), dim3(32, 8), 0, stream>>>(
        static_cast<TO*>(out.data_ptr()), partial.data<float>(), P, cols, accumulate);
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tetra::cuda
