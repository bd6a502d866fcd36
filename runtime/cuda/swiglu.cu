// CUDA SwiGLU on a fused gate/up projection gu[N, 2F] = [gate | up] (runtime/ops.h):
//   forward   h = silu(g)·u,  silu(g) = g·σ(g),  σ(g) = 1/(1 + e^−g)
//   backward  dg = dh·u·σ(g)·(1 + g·(1 − σ(g))),  du = dh·silu(g)
// Shapes: gate_up, d_gate_up [..., 2F]; h, dh [..., F]. Any mix of fp32/bf16 tensors, fp32 math
// (full-precision expf). A thread owns V consecutive columns f … f + V − 1 of a row (V = 8, 16-byte
// accesses, when F % 8 == 0 and every tensor is 16-byte aligned; else V = 1): the blocks stride over
// the rows, several short rows a block at a time (RowSplit), and a row's threads over its F/V column
// groups (no index division). Bytes per row: forward reads 2F and writes F values, backward reads 3F
// and writes 2F:
// at Llama-1B's N = 16384, F = 8192 in bf16 that is 0.81 GB (≈ 0.19 ms at 4.3 TB/s) and 1.34 GB
// (≈ 0.31 ms).
#include <algorithm>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"

namespace tetra::cuda {

namespace {

constexpr int kSwigluThreads = 256;

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// Which rows and columns a thread takes: a block covers `rows_per_block` rows at a time, each by
// lanes_per_row = blockDim / rows_per_block threads striding over its F/V column groups. A row of F/V
// groups (a multiple of 32 that divides the block) takes that many threads, so that short rows (a
// routed expert's F = 512: 64 groups) keep every thread busy; longer or odd rows take the whole
// block. Either way lanes_per_row is a multiple of 32: a warp stays on one row.
struct RowSplit {
  int rows_per_block;
  __device__ int lanes() const { return static_cast<int>(blockDim.x) / rows_per_block; }
  __device__ int64_t first_row() const {
    return static_cast<int64_t>(blockIdx.x) * rows_per_block + static_cast<int>(threadIdx.x) / lanes();
  }
  __device__ int64_t row_stride() const { return static_cast<int64_t>(gridDim.x) * rows_per_block; }
  __device__ int64_t first_col(int V) const { return static_cast<int64_t>(threadIdx.x % lanes()) * V; }
};

RowSplit split_rows(int64_t F, int V) {
  const int64_t groups = F / V;
  const bool fits = groups >= 32 && groups % 32 == 0 && kSwigluThreads % groups == 0;
  return {fits ? static_cast<int>(kSwigluThreads / groups) : 1};
}

// amax (may be null): max |h| bits as stored (ops.h), zeroed before the launch; row_amax (may be
// null) each row's, zeroed too (one atomic per warp and row: a warp stays on one row).
template <int V, class TH, class TG>
__global__ void __launch_bounds__(kSwigluThreads)
    swiglu_forward_kernel(TH* h, const TG* gu, int64_t rows, int64_t F, RowSplit split, unsigned* amax,
                          unsigned* row_amax) {
  unsigned m = 0;
  const int64_t col_step = static_cast<int64_t>(split.lanes()) * V;
  for (int64_t n = split.first_row(); n < rows; n += split.row_stride()) {
    unsigned row_m = 0;
    const TG* g_row = gu + n * 2 * F;
    TH* h_row = h + n * F;
    for (int64_t f = split.first_col(V); f < F; f += col_step) {
      float g[V], u[V], out[V];
      load_vec<V>(g_row + f, g);
      load_vec<V>(g_row + F + f, u);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        out[j] = g[j] * sigmoid(g[j]) * u[j];
        row_m = max(row_m, stored_abs_bits<TH>(out[j]));
      }
      store_vec<V>(h_row + f, out);
    }
    m = max(m, row_m);
    warp_row_amax_to(row_amax, n, row_m);
  }
  block_amax_to(amax, m);
}

template <int V, class TD, class TH, class TG>
__global__ void __launch_bounds__(kSwigluThreads)
    swiglu_backward_kernel(TD* dgu, const TH* dh, const TG* gu, int64_t rows, int64_t F, RowSplit split,
                           unsigned* amax, unsigned* row_amax) {
  unsigned m = 0;
  const int64_t col_step = static_cast<int64_t>(split.lanes()) * V;
  for (int64_t n = split.first_row(); n < rows; n += split.row_stride()) {
    unsigned row_m = 0;
    const TG* g_row = gu + n * 2 * F;
    const TH* dh_row = dh + n * F;
    TD* d_row = dgu + n * 2 * F;
    for (int64_t f = split.first_col(V); f < F; f += col_step) {
      float g[V], u[V], d[V], dg[V], du[V];
      load_vec<V>(g_row + f, g);
      load_vec<V>(g_row + F + f, u);
      load_vec<V>(dh_row + f, d);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float s = sigmoid(g[j]);
        dg[j] = d[j] * u[j] * s * (1.0f + g[j] * (1.0f - s));
        du[j] = d[j] * g[j] * s;
        row_m = max(row_m, max(stored_abs_bits<TD>(dg[j]), stored_abs_bits<TD>(du[j])));
      }
      store_vec<V>(d_row + f, dg);
      store_vec<V>(d_row + F + f, du);
    }
    m = max(m, row_m);
    warp_row_amax_to(row_amax, n, row_m);
  }
  block_amax_to(amax, m);
}

// Blocks: one per rows_per_block rows, at most 128 per SM (the grid strides over the rest).
int row_blocks(int64_t rows, const RowSplit& split, Device dev) {
  const int64_t needed = (rows + split.rows_per_block - 1) / split.rows_per_block;
  return static_cast<int>(std::min<int64_t>(needed, int64_t{16} * 8 * sm_count(dev)));
}

// gate_up [..., 2F] on CUDA; returns F.
int64_t check_gate_up(const char* op, const Tensor& gate_up) {
  check_cuda_float(op, "gate_up", gate_up);
  if (gate_up.ndim() < 1 || gate_up.dim(-1) % 2 != 0)
    TETRA_FAIL(Internal, op, ": gate_up must be [..., 2F] (gate | up), got ", gate_up.describe());
  return gate_up.dim(-1) / 2;
}

// V = 8 needs F % 8 == 0 and each row of every tensor starting 16-byte aligned.
bool vectorizable(int64_t F, std::initializer_list<const Tensor*> ts) {
  if (F % 8 != 0) return false;
  for (const Tensor* t : ts)
    if (!aligned16(t->data_ptr()) || (F * static_cast<int64_t>(dtype_size(t->dtype()))) % 16 != 0) return false;
  return true;
}

}  // namespace

void swiglu_forward(Tensor& h, const Tensor& gate_up, Tensor* amax, Tensor* row_amax) {
  const char* op = "swiglu_forward";
  const int64_t F = check_gate_up(op, gate_up);
  check_cuda_float(op, "h", h);
  check_shape(op, "h", h, with_last(leading_shape(gate_up), F));
  check_disjoint(op, "gate_up", h, gate_up);
  const int64_t rows = rows_of(gate_up);
  const Device dev = h.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  unsigned* pa = start_amax(op, amax, stream);
  unsigned* pr = start_amax(op, row_amax, stream);
  if (rows == 0 || F == 0) return;
  const bool vec = vectorizable(F, {&h, &gate_up});
  dispatch_float(h.dtype(), op, "h", [&](auto th) {
    dispatch_float(gate_up.dtype(), op, "gate_up", [&](auto tg) {
      using TH = decltype(th);
      using TG = decltype(tg);
      TH* ph = static_cast<TH*>(h.data_ptr());
      const TG* pg = static_cast<const TG*>(gate_up.data_ptr());
      const RowSplit split = split_rows(F, vec ? 8 : 1);
      const int blocks = row_blocks(rows, split, dev);
      if (vec)
        swiglu_forward_kernel<8><<<blocks, kSwigluThreads, 0, stream>>>(ph, pg, rows, F, split, pa, pr);
      else
        swiglu_forward_kernel<1><<<blocks, kSwigluThreads, 0, stream>>>(ph, pg, rows, F, split, pa, pr);
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
}

void swiglu_backward(Tensor& d_gate_up, const Tensor& dh, const Tensor& gate_up, Tensor* amax, Tensor* row_amax) {
  const char* op = "swiglu_backward";
  const int64_t F = check_gate_up(op, gate_up);
  check_cuda_float(op, "dh", dh);
  check_shape(op, "dh", dh, with_last(leading_shape(gate_up), F));
  check_cuda_float(op, "d_gate_up", d_gate_up);
  check_shape(op, "d_gate_up", d_gate_up, gate_up.shape());
  check_disjoint(op, "gate_up", d_gate_up, gate_up);
  check_disjoint(op, "dh", d_gate_up, dh);
  const int64_t rows = rows_of(gate_up);
  const Device dev = d_gate_up.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  unsigned* pa = start_amax(op, amax, stream);
  unsigned* pr = start_amax(op, row_amax, stream);
  if (rows == 0 || F == 0) return;
  const bool vec = vectorizable(F, {&d_gate_up, &dh, &gate_up});
  dispatch_floats(
      op,
      [&](auto td, auto th, auto tg) {
        using TD = decltype(td);
        using TH = decltype(th);
        using TG = decltype(tg);
        TD* pd = static_cast<TD*>(d_gate_up.data_ptr());
        const TH* ph = static_cast<const TH*>(dh.data_ptr());
        const TG* pg = static_cast<const TG*>(gate_up.data_ptr());
        const RowSplit split = split_rows(F, vec ? 8 : 1);
        const int blocks = row_blocks(rows, split, dev);
        if (vec)
          swiglu_backward_kernel<8><<<blocks, kSwigluThreads, 0, stream>>>(pd, ph, pg, rows, F, split, pa, pr);
        else
          swiglu_backward_kernel<1><<<blocks, kSwigluThreads, 0, stream>>>(pd, ph, pg, rows, F, split, pa, pr);
        TETRA_CUDA_CHECK_LAUNCH();
      },
      d_gate_up.dtype(), "d_gate_up", dh.dtype(), "dh", gate_up.dtype(), "gate_up");
}

}  // namespace tetra::cuda
