// CUDA fused softmax cross-entropy, one block per row, never materialising fp32 logits:
//   pass 1   online (max, Σ exp) over the row in fp32, folded across the block in a fixed order
//            lse = max + log Σ exp(logits - max),  loss = lse - logits[target]
//   pass 2   dlogits = grad_scale · (exp(logits - lse) - onehot(target))      (if dlogits is given)
// Shapes: logits, dlogits [N, V] (any leading dimensions, one dtype, fp32 or bf16); targets int32 [N];
// losses fp32 [N]. A target < 0 is ignored: loss 0 and a zero gradient row. dlogits may alias logits:
// logits[target] is read before the block's barrier, and in pass 2 every element is read by the
// thread that then overwrites it. A target ≥ V cannot be reported without a synchronisation; its
// loss is NaN (and its gradient row zero), which the trainer's non-finite loss check catches.
//
// Rows of at most about half an SM's shared memory (bf16 GPT-2: 50,304 logits, 100.6 KB) take the
// staged kernel: the block copies its row into shared memory with cp.async (each thread its own
// 16-byte chunks, all in flight at once, read back by the same thread, so no barrier before pass 1),
// and both passes read the copy: HBM sees one read and one write of the row, where the two-read
// kernel's pass 2 reads the row again (from L2 when it is still there). Its exponentials are
// 2^(x·log2 e − m·log2 e) on the special-function unit (ex2.approx, within 2 ulp): one FFMA and one
// MUFU an element and pass, where expf costs about ten instructions; pass 1 rescales a thread's sum
// only when a chunk raises its running max. Two blocks an SM, so that one block's copy overlaps the
// other's arithmetic. Per row of GPT-2 bf16: 100.6 KB read + 100.6 KB written, 2 × 50,304 ex2.
//
// Vocabulary-parallel form (tensor parallelism; runtime/ops.h): cross_entropy_shard_stats runs pass 1
// over this rank's columns and writes the shard's (max, Σ exp(x − max), target logit);
// cross_entropy_from_stats folds every rank's stats in rank order into the row's lse and runs pass 2
// over the shard (one block per row in both).
#include <cmath>

#include "runtime/cuda/cp_async.cuh"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/launch_prepare.h"

namespace tetra::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kStagedThreads = 512;  // two blocks an SM: 1,024 threads, at most 64 registers each
constexpr float kLog2e = 1.4426950408889634f;

// 2^x on the special-function unit: ex2.approx, within 2 ulp; results below 2^-126 flush to 0.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A partial softmax denominator: s = Σ exp(x - m) over the elements seen, m their maximum.
struct MaxSum {
  float m;
  float s;
};

// Combines two partials (commutative, bitwise: fp addition and max are).
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warp_combine(MaxSum v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = combine(v, other);
  }
  return v;
}

// The block's partials folded into one (every thread of the block calls it and gets the result; it
// synchronises through scratch[32]): the warps, then the warps' partials, every warp folding the same
// values in the same order.
__device__ __forceinline__ MaxSum block_combine(MaxSum acc, MaxSum* scratch) {
  acc = warp_combine(acc);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = acc;
  __syncthreads();
  const MaxSum total = lane < warps ? scratch[lane] : MaxSum{-INFINITY, 0.0f};
  return warp_combine(total);
}

// The row's softmax denominator over its `vocab` columns x (every thread of the block calls it; it
// synchronises through scratch[32]): each thread folds its vectors, then block_combine.
template <int V, class T>
__device__ __forceinline__ MaxSum block_max_sum(const T* x, int64_t vocab, MaxSum* scratch) {
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t i = static_cast<int64_t>(threadIdx.x) * V; i < vocab; i += static_cast<int64_t>(blockDim.x) * V) {
    float v[V];
    load_vec<V>(x + i, v);
    float mv = v[0];
#pragma unroll
    for (int j = 1; j < V; ++j) mv = fmaxf(mv, v[j]);
    const float m = fmaxf(acc.m, mv);
    if (m == -INFINITY) continue;  // only -inf seen so far (fully masked): nothing to add
    float s = acc.m == -INFINITY ? 0.0f : acc.s * expf(acc.m - m);
#pragma unroll
    for (int j = 0; j < V; ++j) s += expf(v[j] - m);
    acc = {m, s};
  }
  return block_combine(acc, scratch);
}

// d[c] = grad_scale · (exp(x[c] − lse) − [c == target]) over the row's `vocab` columns (zero
// probabilities where the row's target is not valid); target is the column index within these columns.
template <int V, class T>
__device__ __forceinline__ void write_row_gradient(T* d, const T* x, int64_t vocab, float lse, int64_t target,
                                                   bool valid, float grad_scale) {
  for (int64_t i = static_cast<int64_t>(threadIdx.x) * V; i < vocab; i += static_cast<int64_t>(blockDim.x) * V) {
    float v[V];
    load_vec<V>(x + i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float p = valid ? expf(v[j] - lse) : 0.0f;
      v[j] = grad_scale * (p - (valid && i + j == target ? 1.0f : 0.0f));
    }
    store_vec<V>(d + i, v);
  }
}

template <int V, class T>
__global__ void softmax_cross_entropy_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                                             int64_t vocab, float grad_scale) {
  __shared__ MaxSum scratch[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  const int32_t target = targets[row];
  const bool valid = target >= 0 && target < vocab;
  // Read logits[target] now: after the barriers below, pass 2 may overwrite it (dlogits == logits).
  const float x_target = (threadIdx.x == 0 && valid) ? to_f32(x[target]) : 0.0f;

  const MaxSum total = block_max_sum<V>(x, vocab, scratch);
  const float lse = total.m + logf(total.s);

  if (threadIdx.x == 0)
    losses[row] = target < 0 ? 0.0f : (valid ? lse - x_target : __int_as_float(0x7fc00000));
  if (!dlogits) return;
  __syncthreads();  // thread 0 has read logits[target] before anyone overwrites the row
  // an invalid target (< 0 or ≥ vocab) matches no column
  write_row_gradient<V>(dlogits + row * vocab, x, vocab, lse, target, valid, grad_scale);
}

// The staged form of softmax_cross_entropy_kernel (the file's header): the row is read from HBM once.
// Dynamic shared memory: the row, vocab elements of T (vocab % 8 == 0, 16-byte aligned).
template <class T>
__global__ void __launch_bounds__(kStagedThreads, 2)
    softmax_cross_entropy_staged_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                                        int64_t vocab, float grad_scale) {
  extern __shared__ uint4 staged[];
  __shared__ MaxSum scratch[32];
  T* copy = reinterpret_cast<T*>(staged);
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  const int chunks = static_cast<int>(vocab / 8);  // of 8 elements: one 16-byte copy (bf16) or two (fp32)
  constexpr int kPer16 = 16 / sizeof(T);
  for (int c = threadIdx.x; c < chunks; c += blockDim.x)
#pragma unroll
    for (int k = 0; k < 8; k += kPer16) cp_async16(smem_addr(copy + c * 8 + k), x + c * 8 + k, true);
  cp_async_commit();
  cp_async_wait<0>();  // this thread's chunks: pass 1 reads only those, so no barrier yet

  // Pass 1: the thread's running (max, Σ 2^((x − max)·log2 e)), rescaled when a chunk raises the max.
  MaxSum acc{-INFINITY, 0.0f};
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    float v[8];
    load_vec<8>(copy + c * 8, v);
    float mv = v[0];
#pragma unroll
    for (int j = 1; j < 8; ++j) mv = fmaxf(mv, v[j]);
    if (mv > acc.m) {
      acc.s = acc.m == -INFINITY ? 0.0f : acc.s * ex2_approx((acc.m - mv) * kLog2e);
      acc.m = mv;
    }
    if (acc.m == -INFINITY) continue;  // only -inf seen so far (fully masked): nothing to add
    const float m_log2 = acc.m * kLog2e;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc.s += ex2_approx(fmaf(v[j], kLog2e, -m_log2));
  }
  const MaxSum total = block_combine(acc, scratch);  // its barrier makes every copy visible to the block
  const float lse = total.m + logf(total.s);
  const int32_t target = targets[row];
  const bool valid = target >= 0 && target < vocab;
  if (threadIdx.x == 0)
    losses[row] = target < 0 ? 0.0f : (valid ? lse - to_f32(copy[target]) : __int_as_float(0x7fc00000));
  if (!dlogits) return;

  // Pass 2 from the copy: every global read finished before the barrier, so dlogits may be logits.
  T* d = dlogits + row * vocab;
  const float lse_log2 = lse * kLog2e;
  const int target_chunk = valid ? target / 8 : -1, target_lane = target % 8;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    float v[8];
    load_vec<8>(copy + c * 8, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float p = valid ? ex2_approx(fmaf(v[j], kLog2e, -lse_log2)) : 0.0f;
      v[j] = grad_scale * (p - (c == target_chunk && j == target_lane ? 1.0f : 0.0f));
    }
    store_vec<8>(d + c * 8, v);
  }
}

// Pass 1 over the shard of one row: stats[0, n] = max, stats[1, n] = Σ exp(x − max), stats[2, n] =
// the target's logit if it lies in [begin, begin + vocab) (else 0).
template <int V, class T>
__global__ void cross_entropy_shard_stats_kernel(float* stats, const T* logits, const int32_t* targets, int64_t N,
                                                 int64_t vocab, int64_t begin) {
  __shared__ MaxSum scratch[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  const MaxSum total = block_max_sum<V>(x, vocab, scratch);
  if (threadIdx.x == 0) {
    const int64_t t = static_cast<int64_t>(targets[row]) - begin;
    stats[row] = total.m;
    stats[N + row] = total.s;
    stats[2 * N + row] = targets[row] >= 0 && t >= 0 && t < vocab ? to_f32(x[t]) : 0.0f;
  }
}

// Pass 2 over the shard of one row, with the row's lse folded from every rank's stats (rank order;
// every thread folds the same values alike): losses[n] = lse − target logit, dlogits = grad_scale ·
// (exp(x − lse) − onehot) over the shard's columns.
template <int V, class T>
__global__ void cross_entropy_from_stats_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                                                const float* all_stats, int ranks, int64_t N, int64_t vocab,
                                                int64_t begin, int64_t full_vocab, float grad_scale) {
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  const bool valid = target >= 0 && target < full_vocab;
  MaxSum acc{-INFINITY, 0.0f};
  float picked = 0.0f;
  for (int r = 0; r < ranks; ++r) {
    const float* st = all_stats + static_cast<int64_t>(r) * 3 * N;
    acc = combine(acc, MaxSum{st[row], st[N + row]});
    picked += st[2 * N + row];
  }
  const float lse = acc.m + logf(acc.s);
  if (threadIdx.x == 0) losses[row] = target < 0 ? 0.0f : (valid ? lse - picked : __int_as_float(0x7fc00000));
  if (!dlogits) return;
  const T* x = logits + row * vocab;
  write_row_gradient<V>(dlogits + row * vocab, x, vocab, lse, static_cast<int64_t>(target) - begin, valid, grad_scale);
}

// Whether the staged kernel takes rows of row_bytes on dev: two of its blocks must fit on an SM, so
// that one block's copy overlaps the other's arithmetic (GPT-2's 50,304 bf16 logits, 100.6 KB a row,
// on Hopper's 227 KB); larger rows (Llama 3's 128,256) take the two-read kernel.
template <class T>
bool stages_rows(size_t row_bytes, Device dev) {
  if (static_cast<int64_t>(row_bytes + 32 * sizeof(MaxSum)) > max_shared_optin(dev)) return false;  // + scratch
  return prepare_launch(softmax_cross_entropy_staged_kernel<T>, kStagedThreads, row_bytes, dev) >= 2;
}

// The shapes both vocabulary-parallel passes share; returns N.
int64_t check_shard_logits(const char* op, const Tensor& logits, const Tensor& targets, const ops::VocabShard& shard) {
  check_cuda_float(op, "logits", logits);
  if (logits.ndim() != 2) TETRA_FAIL(Internal, op, ": logits must be [N, Vr], got ", logits.describe());
  check_cuda_tensor(op, "targets", targets);
  check_dtype(op, "targets", targets, DType::I32);
  check_shape(op, "targets", targets, {logits.dim(0)});
  if (shard.begin < 0 || shard.begin + logits.dim(1) > shard.vocab)
    TETRA_FAIL(Internal, op, ": vocabulary shard [", shard.begin, ", ", shard.begin + logits.dim(1), ") outside [0, ",
               shard.vocab, ")");
  if (logits.dim(1) == 0) TETRA_FAIL(Internal, op, ": logits ", logits.describe(), " have an empty vocabulary shard");
  if (logits.dim(0) > INT32_MAX) TETRA_FAIL(Internal, op, ": ", logits.dim(0), " rows in one call, more than 2³¹ - 1");
  return logits.dim(0);
}

}  // namespace

void softmax_cross_entropy(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                           float grad_scale) {
  const char* op = "softmax_cross_entropy";
  check_cuda_float(op, "logits", logits);
  if (logits.ndim() < 1) TETRA_FAIL(Internal, op, ": logits must be [N, V], got ", logits.describe());
  const int64_t V = logits.dim(-1);
  const Shape row_shape = leading_shape(logits);
  check_cuda_tensor(op, "targets", targets);
  check_dtype(op, "targets", targets, DType::I32);
  check_shape(op, "targets", targets, row_shape);
  check_cuda_tensor(op, "losses", losses);
  check_dtype(op, "losses", losses, DType::F32);
  check_shape(op, "losses", losses, row_shape);
  const bool with_grad = given(dlogits);
  if (with_grad) {
    check_cuda_tensor(op, "dlogits", *dlogits);
    check_dtype(op, "dlogits", *dlogits, logits.dtype());
    check_shape(op, "dlogits", *dlogits, logits.shape());
  }
  const int64_t N = shape_numel(row_shape);
  if (N == 0) return;
  if (V == 0) TETRA_FAIL(Internal, op, ": logits ", logits.describe(), " have an empty vocabulary");
  if (N > INT32_MAX) TETRA_FAIL(Internal, op, ": ", N, " rows in one call, more than 2³¹ - 1");
  const Device dev = losses.device();
  DeviceScope scope(dev);
  const bool vec = V % 8 == 0 && aligned16(logits.data_ptr()) && (!with_grad || aligned16(dlogits->data_ptr()));
  dispatch_float(logits.dtype(), op, "logits", [&](auto tl) {
    using T = decltype(tl);
    T* d = with_grad ? static_cast<T*>(dlogits->data_ptr()) : nullptr;
    const T* x = static_cast<const T*>(logits.data_ptr());
    const size_t row_bytes = static_cast<size_t>(V) * sizeof(T);
    if (vec && stages_rows<T>(row_bytes, dev)) {
      softmax_cross_entropy_staged_kernel<T><<<static_cast<unsigned>(N), kStagedThreads, row_bytes, stream_of(dev)>>>(
          losses.data<float>(), d, x, targets.data<int32_t>(), V, grad_scale);
    } else {
      auto kernel = vec ? softmax_cross_entropy_kernel<8, T> : softmax_cross_entropy_kernel<1, T>;
      kernel<<<static_cast<unsigned>(N), kThreads, 0, stream_of(dev)>>>(losses.data<float>(), d, x,
                                                                         targets.data<int32_t>(), V, grad_scale);
    }
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_shard_stats(Tensor& stats, const Tensor& logits, const Tensor& targets, ops::VocabShard shard) {
  const char* op = "cross_entropy_shard_stats";
  const int64_t N = check_shard_logits(op, logits, targets, shard);
  check_cuda_tensor(op, "stats", stats);
  check_dtype(op, "stats", stats, DType::F32);
  check_shape(op, "stats", stats, {3, N});
  if (N == 0) return;
  const int64_t V = logits.dim(1);
  const Device dev = stats.device();
  DeviceScope scope(dev);
  const bool vec = V % 8 == 0 && aligned16(logits.data_ptr());
  dispatch_float(logits.dtype(), op, "logits", [&](auto tl) {
    using T = decltype(tl);
    auto kernel = vec ? cross_entropy_shard_stats_kernel<8, T> : cross_entropy_shard_stats_kernel<1, T>;
    kernel<<<static_cast<unsigned>(N), kThreads, 0, stream_of(dev)>>>(
        stats.data<float>(), static_cast<const T*>(logits.data_ptr()), targets.data<int32_t>(), N, V, shard.begin);
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_from_stats(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                              ops::VocabShard shard, const Tensor& all_stats, float grad_scale) {
  const char* op = "cross_entropy_from_stats";
  const int64_t N = check_shard_logits(op, logits, targets, shard);
  check_cuda_tensor(op, "all_stats", all_stats);
  check_dtype(op, "all_stats", all_stats, DType::F32);
  if (all_stats.ndim() != 3 || all_stats.dim(1) != 3 || all_stats.dim(2) != N || all_stats.dim(0) < 1 ||
      all_stats.dim(0) > 1024)
    TETRA_FAIL(Internal, op, ": all_stats must be [tp, 3, ", N, "] with 1 ≤ tp ≤ 1024, got ", all_stats.describe());
  check_cuda_tensor(op, "losses", losses);
  check_dtype(op, "losses", losses, DType::F32);
  check_shape(op, "losses", losses, {N});
  const bool with_grad = given(dlogits);
  if (with_grad) {
    check_cuda_tensor(op, "dlogits", *dlogits);
    check_dtype(op, "dlogits", *dlogits, logits.dtype());
    check_shape(op, "dlogits", *dlogits, logits.shape());
  }
  if (N == 0) return;
  const int64_t V = logits.dim(1);
  const Device dev = losses.device();
  DeviceScope scope(dev);
  const bool vec = V % 8 == 0 && aligned16(logits.data_ptr()) && (!with_grad || aligned16(dlogits->data_ptr()));
  dispatch_float(logits.dtype(), op, "logits", [&](auto tl) {
    using T = decltype(tl);
    auto kernel = vec ? cross_entropy_from_stats_kernel<8, T> : cross_entropy_from_stats_kernel<1, T>;
    kernel<<<static_cast<unsigned>(N), kThreads, 0, stream_of(dev)>>>(
        losses.data<float>(), with_grad ? static_cast<T*>(dlogits->data_ptr()) : nullptr,
        static_cast<const T*>(logits.data_ptr()), targets.data<int32_t>(), all_stats.data<float>(),
        static_cast<int>(all_stats.dim(0)), N, V, shard.begin, shard.vocab, grad_scale);
    TETRA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tetra::cuda
