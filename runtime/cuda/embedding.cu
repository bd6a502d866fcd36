// CUDA token + position embedding:
//   forward   y[n, :] = wte[ids[n], :] + wpe[n mod T, :]          (wpe optional)
//   backward  dwte[ids[n], :] += dy[n, :],  dwpe[t, :] += Σ_{n mod T = t} dy[n, :]
// Shapes: ids int32 [N] or [B, T] (N = B·T, T = seq_len); wte [V, C]; wpe [≥T, C]; y, dy = ids' shape + [C].
//
// Backward is deterministic and touches only the rows of dwte whose token occurs: the positions are
// sorted by token id (CUB's stable radix sort of (id, n) pairs), then one block per distinct id sums
// that token's dy rows in position order in fp32 and adds the sum to dwte[id] once. dwpe is a
// column-parallel sum over the batch, in order.
//
// With a vocabulary shard (ops::VocabShard, tensor parallelism) wte [Vr, C] holds ids
// [begin, begin + Vr) of shard.vocab: another shard's id reads a zero token row (forward; the position
// row is still added) and is skipped by backward, like the sentinel below.
//
// An id outside [0, vocab) cannot be reported from the device without a synchronisation, so it is
// poisoned instead: forward writes NaN into its output row (the loss turns NaN and the step is
// flagged), backward skips it. The CPU backend rejects such ids up front.
#include <cub/device/device_radix_sort.cuh>

#include <bit>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"

namespace tetra::cuda {

namespace {

constexpr int kThreads = 256;

// One thread per V-wide piece of an output row: y[n, c..c+V) = wte[id − begin, c..) + wpe[n mod T, c..),
// the token row zero for an id of the vocabulary outside the table's rows [begin, begin + rows).
template <int V, class TY, class TW>
__global__ void embedding_forward_kernel(TY* y, const int32_t* ids, const TW* wte, const TW* wpe, int64_t N, int C,
                                         int64_t T, int64_t vocab, int64_t begin, int64_t rows) {
  const int pieces = C / V;
  const int64_t total = N * pieces;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t n = idx / pieces;
    const int c = static_cast<int>(idx % pieces) * V;
    const int32_t id = ids[n];
    float out[V];
    if (id < 0 || id >= vocab) {
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = __int_as_float(0x7fc00000);  // NaN
    } else {
      const int64_t row = static_cast<int64_t>(id) - begin;
      if (row >= 0 && row < rows) {
        load_vec<V>(wte + row * C + c, out);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] = 0.0f;
      }
      if (wpe) {
        float pe[V];
        load_vec<V>(wpe + (n % T) * C + c, pe);
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] += pe[j];
      }
    }
    store_vec<V>(y + n * C + c, out);
  }
}

// keys[n] = ids[n] − begin if it is one of the table's rows [0, rows), else rows (a sentinel that
// sorts last and is skipped: an invalid id, or another shard's); positions[n] = n.
__global__ void embedding_keys_kernel(int32_t* keys, int32_t* positions, const int32_t* ids, int64_t N, int64_t begin,
                                      int64_t rows) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < N; n += stride) {
    const int64_t row = static_cast<int64_t>(ids[n]) - begin;
    keys[n] = (row >= 0 && row < rows) ? static_cast<int32_t>(row) : static_cast<int32_t>(rows);
    positions[n] = static_cast<int32_t>(n);
  }
}

// Block i handles sorted slot i if it starts a run of equal ids: dwte[id, :] += Σ_run dy[position, :].
// Runs are in ascending position order (the sort is stable), so the sum is deterministic.
template <class TD, class TG>
__global__ void embedding_wte_grad_kernel(TG* dwte, const TD* dy, const int32_t* keys, const int32_t* positions,
                                          int64_t N, int C, int64_t vocab) {
  const int64_t i = blockIdx.x;
  const int32_t id = keys[i];
  if (id >= vocab || (i > 0 && keys[i - 1] == id)) return;  // sentinel, or not the start of a run
  int64_t end = i + 1;
  while (end < N && keys[end] == id) ++end;
  TG* row = dwte + static_cast<int64_t>(id) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = i; j < end; ++j) acc += to_f32(dy[static_cast<int64_t>(positions[j]) * C + c]);
    row[c] = from_f32<TG>(to_f32(row[c]) + acc);
  }
}

// dwpe[t, c] += Σ_{n ≡ t mod T, n < N} dy[n, c]   (one thread per (t, c), n ascending).
template <class TD, class TG>
__global__ void embedding_wpe_grad_kernel(TG* dwpe, const TD* dy, int64_t N, int C, int64_t T) {
  const int64_t total = T * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t t = idx / C;
    const int c = static_cast<int>(idx % C);
    float acc = 0.0f;
    for (int64_t n = t; n < N; n += T) acc += to_f32(dy[n * C + c]);
    dwpe[idx] = from_f32<TG>(to_f32(dwpe[idx]) + acc);
  }
}

void check_table(const char* op, const char* what, const Tensor& t) {
  check_cuda_float(op, what, t);
  if (t.ndim() != 2) TETRA_FAIL(Internal, op, ": ", what, " must be 2-D [rows, C], got ", t.describe());
}

void check_positions(const char* op, const char* what, const Tensor& wpe, const Tensor& wte, int64_t seq_len) {
  check_table(op, what, wpe);
  check_dtype(op, what, wpe, wte.dtype());
  if (wpe.dim(1) != wte.dim(1) || wpe.dim(0) < seq_len)
    TETRA_FAIL(Internal, op, ": ", what, " must be [≥", seq_len, ", ", wte.dim(1), "] (seq_len ", seq_len,
               " positions), got ", wpe.describe());
}

int64_t check_ids(const char* op, const Tensor& ids, int64_t seq_len) {
  check_cuda_tensor(op, "ids", ids);
  check_dtype(op, "ids", ids, DType::I32);
  if (seq_len <= 0) TETRA_FAIL(Internal, op, ": seq_len must be > 0, got ", seq_len);
  const int64_t N = ids.numel();
  if (N % seq_len != 0)
    TETRA_FAIL(Internal, op, ": ids ", ids.describe(), " hold ", N, " tokens, not a multiple of seq_len ", seq_len);
  if (N > INT32_MAX) TETRA_FAIL(Internal, op, ": ", N, " tokens in one call, more than 2³¹ - 1");
  return N;
}

int check_channels(const char* op, int64_t C) {
  if (C <= 0 || C > INT32_MAX) TETRA_FAIL(Internal, op, ": embedding width ", C, " out of range");
  return static_cast<int>(C);
}

}  // namespace

void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& wte, const Tensor& wpe, int64_t seq_len,
                       ops::VocabShard shard) {
  const char* op = "embedding_forward";
  check_table(op, "wte", wte);
  const int64_t V = wte.dim(0);
  const int64_t vocab = ops::shard_vocabulary(op, shard, V);
  const int C = check_channels(op, wte.dim(1));
  if (wpe.defined()) check_positions(op, "wpe", wpe, wte, seq_len);
  check_cuda_float(op, "y", y);
  check_shape(op, "y", y, with_last(ids.shape(), C));
  const int64_t N = check_ids(op, ids, seq_len);
  if (N == 0) return;
  const Device dev = y.device();
  DeviceScope scope(dev);
  const bool vec = C % 8 == 0 && aligned16(y.data_ptr()) && aligned16(wte.data_ptr()) &&
                   (!wpe.defined() || aligned16(wpe.data_ptr()));
  dispatch_float(y.dtype(), op, "y", [&](auto ty) {
    dispatch_float(wte.dtype(), op, "wte", [&](auto tw) {
      using TY = decltype(ty);
      using TW = decltype(tw);
      auto kernel = vec ? embedding_forward_kernel<8, TY, TW> : embedding_forward_kernel<1, TY, TW>;
      const int64_t items = N * (vec ? C / 8 : C);
      kernel<<<grid_size(items, kThreads, dev), kThreads, 0, stream_of(dev)>>>(
          static_cast<TY*>(y.data_ptr()), ids.data<int32_t>(), static_cast<const TW*>(wte.data_ptr()),
          wpe.defined() ? static_cast<const TW*>(wpe.data_ptr()) : nullptr, N, C, seq_len, vocab, shard.begin, V);
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
}

void embedding_backward(Tensor& dwte, Tensor* dwpe, const Tensor& dy, const Tensor& ids, int64_t seq_len,
                        ops::VocabShard shard) {
  const char* op = "embedding_backward";
  check_table(op, "dwte", dwte);
  const int64_t V = dwte.dim(0);
  (void)ops::shard_vocabulary(op, shard, V);
  const int C = check_channels(op, dwte.dim(1));
  const bool with_pos = given(dwpe);
  if (with_pos) check_positions(op, "dwpe", *dwpe, dwte, seq_len);
  check_cuda_float(op, "dy", dy);
  check_shape(op, "dy", dy, with_last(ids.shape(), C));
  const int64_t N = check_ids(op, ids, seq_len);
  if (N == 0) return;
  if (V >= INT32_MAX) TETRA_FAIL(Internal, op, ": vocabulary of ", V, " rows is too large for int32 ids");
  const Device dev = dwte.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);

  // Scratch: keys and positions, in and out of the sort, then CUB's own temporary storage.
  const int num = static_cast<int>(N);
  const int end_bit = std::bit_width(static_cast<uint32_t>(V));  // keys lie in [0, V]
  size_t cub_bytes = 0;
  TETRA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, static_cast<const int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), num, 0, end_bit, stream));
  const int64_t index_bytes = ((N * 4 + 255) / 256) * 256;  // each array 256-byte aligned
  Tensor scratch = Tensor::empty({4 * index_bytes + static_cast<int64_t>(cub_bytes)}, DType::U8, dev);
  auto* base = static_cast<char*>(scratch.data_ptr());
  auto* keys_in = reinterpret_cast<int32_t*>(base);
  auto* pos_in = reinterpret_cast<int32_t*>(base + index_bytes);
  auto* keys = reinterpret_cast<int32_t*>(base + 2 * index_bytes);
  auto* positions = reinterpret_cast<int32_t*>(base + 3 * index_bytes);
  void* cub_temp = base + 4 * index_bytes;

  embedding_keys_kernel<<<grid_size(N, kThreads, dev), kThreads, 0, stream>>>(keys_in, pos_in, ids.data<int32_t>(), N,
                                                                             shard.begin, V);
  TETRA_CUDA_CHECK_LAUNCH();
  TETRA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, keys_in, keys, pos_in, positions, num, 0,
                                                   end_bit, stream));

  dispatch_float(dy.dtype(), op, "dy", [&](auto td) {
    dispatch_float(dwte.dtype(), op, "dwte", [&](auto tg) {
      using TD = decltype(td);
      using TG = decltype(tg);
      embedding_wte_grad_kernel<TD, TG><<<static_cast<unsigned>(N), 128, 0, stream>>>(
          static_cast<TG*>(dwte.data_ptr()), static_cast<const TD*>(dy.data_ptr()), keys, positions, N, C, V);
      TETRA_CUDA_CHECK_LAUNCH();
      if (with_pos) {
        embedding_wpe_grad_kernel<TD, TG><<<grid_size(seq_len * C, kThreads, dev), kThreads, 0, stream>>>(
            static_cast<TG*>(dwpe->data_ptr()), static_cast<const TD*>(dy.data_ptr()), N, C, seq_len);
        TETRA_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

}  // namespace tetra::cuda
