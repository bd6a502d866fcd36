// CUDA LayerNorm (torch.nn.functional.layer_norm) and RMSNorm (Hugging Face's LlamaRMSNorm) over the
// last dimension. RMSNorm is LayerNorm without the mean and the bias, so both run the same kernels,
// instantiated per Norm kind (the RMSNorm instantiation drops the mean's row sum, the bias and db):
//   LayerNorm forward   mean = Σx/C,  rstd = 1/√(Σ(x - mean)²/C + eps),  y = (x - mean)·rstd·w + b
//             backward  x̂ = (x - mean)·rstd,  g = dy·w
//                       dx (+)= rstd·(g - mean_C(g) - x̂·mean_C(g·x̂)),  dw += Σ_rows dy·x̂,  db += Σ_rows dy
//   RMSNorm   forward   rstd = 1/√(Σx²/C + eps),  y = x·rstd·w
//             backward  x̂ = x·rstd,  g = dy·w,  dx (+)= rstd·(g - x̂·mean_C(g·x̂)),  dw += Σ_rows dy·x̂
//   with dresidual: dx = dresidual + rstd·(...)  (the residual stream's gradient, fused)
// Shapes: x, y, dx, dy, dresidual [N, C] (any leading dimensions); w, b [C] (dtype P, b optional);
// mean, rstd [N] fp32; dw, db [C] (one dtype, db optional).
// Dtypes: the residual stream's TX (x, dx, dresidual) and the activations' TA (y, dy, and
// dx_rounded: dx rounded to TA in the same pass): TA = TX (both fp32 or both bf16), or TX fp32 with
// TA bf16 (train.residual_dtype fp32: the stream stays fp32, the GEMMs around the norm read bf16).
//
// The kernels: runtime/cuda/norm_row_kernels.cuh (the fast path) and norm_fallback_kernels.cuh (any
// C, any alignment), parts of this file's translation unit; the fold of their dw/db partials is below.
// The forward's optional amax (ops.h: the largest |y| as stored, for the FP8 cast of the projection
// y feeds) is folded from the values each thread stores, one atomicMax per block at most
// (block_amax_to), in the row and the fallback kernels alike; the backward's dx_amax (the largest
// |dx|, or |dx_rounded| when that is written, as stored) the same way in the backward kernels.
// In the RMSNorm instantiations mean and b are null and nothing is written for db (its partials have
// one row, dw's).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/launch_prepare.h"
#include "runtime/cuda/norm_common.cuh"
#include "runtime/cuda/norm_fallback_kernels.cuh"
#include "runtime/cuda/norm_row_kernels.cuh"
#include "runtime/cuda/reduce.h"

namespace tetra::cuda {

namespace {

// ---------------------------------------------------------------------------------------------
// Weight gradients: dw[c] += Σ_b partial[0, b, c], db[c] += Σ_b partial[1, b, c], b in block order,
// and the column sums of dx: dx_sum[c] = Σ_b partial[2, b, c].
// Grid (⌈C/32⌉, 1, 2 or 3): blockIdx.y picks dw, db or dx_sum (db may be null). Block (32, 16): 32 consecutive channels
// (coalesced) × 16 lanes over the partial rows, folded in shared memory in lane order.
// ---------------------------------------------------------------------------------------------
constexpr int kFoldRows = 16;

template <class TO>
__global__ void layernorm_weight_grad_kernel(TO* dw, TO* db, float* dx_sum, const float* partial, int blocks,
                                             int C) {
  __shared__ float s[kFoldRows][33];
  if (blockIdx.y == 1 && !db) return;  // (a uniform exit: no barrier is skipped by part of the block)
  const int c = blockIdx.x * 32 + threadIdx.x;
  const float* src = partial + static_cast<int64_t>(blockIdx.y) * blocks * C;
  float acc = 0.0f;
  if (c < C)
    for (int b = threadIdx.y; b < blocks; b += kFoldRows) acc += src[static_cast<int64_t>(b) * C + c];
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < kFoldRows; ++j) total += s[j][threadIdx.x];
    if (blockIdx.y == 2) {
      dx_sum[c] = total;  // written, not accumulated
    } else {
      TO* out = blockIdx.y == 0 ? dw : db;
      out[c] = from_f32<TO>(to_f32(out[c]) + total);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------

// Dynamic shared memory of the backward row kernel (see its comment): dy's elements of act_size
// bytes, x's (and the third array's) of stream_size.
size_t backward_rows_smem(int stages, int vpt, int threads, int slots, int C, size_t act_size, size_t stream_size,
                          bool third_array, bool sum_dx) {
  const size_t chunks = act_size / 2 + (third_array ? 2 : 1) * (stream_size / 2);  // per vector
  const size_t staging = size_t(stages) * size_t(vpt) * chunks * threads * 16;
  return staging + size_t(C) * sizeof(float) * ((slots > 1 ? 3 : 1) + (sum_dx ? slots : 0));
}

// The backward row kernel's staging: TETRA_NORM_BACKWARD_STAGES = 2 (unset: the default) or 1 (see
// norm_backward_rows_kernel), read at every call so that one process can run both.
int norm_backward_stages() {
  const char* v = std::getenv("TETRA_NORM_BACKWARD_STAGES");
  if (!v || !*v || std::strcmp(v, "2") == 0) return 2;
  if (std::strcmp(v, "1") == 0) return 1;
  TETRA_FAIL(Config, "TETRA_NORM_BACKWARD_STAGES='", v, "' is not a staging depth of the norm backward: use 2 (",
             "the next row staged while one is computed, the default) or 1 (the row being computed only)");
}

// How a row of C channels (C % 8 == 0) maps onto the row kernels: the fewest warps per row that
// keep each thread at ≤ max_vpt vectors; vpt == 0 when C does not fit (or C % 8 != 0).
struct RowLayout {
  int vpt = 0, team = 0, slots = 0, threads = 0;
};

RowLayout row_layout(int C, int max_vpt) {
  RowLayout l;
  const int nv = C / 8;
  const int team = (nv + 32 * max_vpt - 1) / (32 * max_vpt);
  if (C % 8 != 0 || team > kMaxTeam) return l;
  l.team = team;
  l.vpt = (nv + 32 * team - 1) / (32 * team);
  l.slots = std::max(1, kTargetWarps / team);
  l.threads = l.slots * team * 32;
  return l;
}

// The row kernel instantiation for a VPT chosen at run time (1 ≤ vpt ≤ MaxVpt ≤ 4).
template <template <Norm, int, class, class, class> class Pick, Norm K, int MaxVpt, class T1, class T2, class P>
auto row_kernel(int vpt) {
  static_assert(MaxVpt == 3 || MaxVpt == 4);
  if constexpr (MaxVpt == 4) {
    if (vpt == 4) return Pick<K, 4, T1, T2, P>::get();
  }
  switch (vpt) {
    case 1: return Pick<K, 1, T1, T2, P>::get();
    case 2: return Pick<K, 2, T1, T2, P>::get();
    default: return Pick<K, 3, T1, T2, P>::get();
  }
}
template <Norm K, int VPT, class TX, class TY, class P>
struct PickForward {
  static auto get() { return norm_forward_rows_kernel<K, VPT, TX, TY, P>; }
};
template <int STAGES>
struct PickBackward {
  template <Norm K, int VPT, class TA, class TX, class P>
  struct Pick {
    static auto get() { return norm_backward_rows_kernel<K, VPT, TA, TX, P, STAGES>; }
  };
};
template <Norm K, int MaxVpt, class TA, class TX, class P>
auto backward_row_kernel(int stages, int vpt) {
  return stages == 1 ? row_kernel<PickBackward<1>::Pick, K, MaxVpt, TA, TX, P>(vpt)
                     : row_kernel<PickBackward<2>::Pick, K, MaxVpt, TA, TX, P>(vpt);
}

void check_params(const char* op, const Tensor& w, const Tensor& b) {
  check_cuda_float(op, "w", w);
  if (w.ndim() != 1) TETRA_FAIL(Internal, op, ": w must be 1-D [C], got ", w.describe());
  if (b.defined()) {
    check_cuda_float(op, "b", b);
    check_dtype(op, "b", b, w.dtype());
    check_shape(op, "b", b, w.shape());
  }
}

void check_stats(const char* op, const Tensor& mean, const Tensor& rstd, const Tensor& x) {
  check_cuda_tensor(op, "mean", mean);
  check_dtype(op, "mean", mean, DType::F32);
  check_shape(op, "mean", mean, leading_shape(x));
  check_cuda_tensor(op, "rstd", rstd);
  check_dtype(op, "rstd", rstd, DType::F32);
  check_shape(op, "rstd", rstd, leading_shape(x));
}

int channels(const char* op, int64_t C) {
  if (C <= 0 || C > (int64_t{1} << 30)) TETRA_FAIL(Internal, op, ": cannot normalise rows of ", C, " channels");
  return static_cast<int>(C);
}

// Calls f(TA{}, TX{}) for the (activation, residual stream) dtype pair the kernels are built for:
// one dtype for both, or bf16 activations (y, dy, dx_rounded) beside an fp32 stream (x, dx, dres).
template <class F>
void dispatch_pair(DType act, DType stream, const char* op, const char* act_what, F&& f) {
  if (act == stream) {
    dispatch_float(stream, op, "x", [&](auto t) { f(t, t); });
  } else if (act == DType::BF16 && stream == DType::F32) {
    f(bf16{}, float{});
  } else {
    TETRA_FAIL(Internal, op, ": ", act_what, " is ", dtype_name(act), " but x is ", dtype_name(stream), " (", act_what,
               " must have x's dtype, or be bf16 with an fp32 x)");
  }
}

// An activation-side tensor (y, dy) of x's shape; of another dtype than x's it may not share x's memory.
void check_act(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  check_cuda_float(op, what, t);
  check_shape(op, what, t, x.shape());
  if (t.dtype() != x.dtype()) check_disjoint(op, "x", t, x);
}

// Runs norm K's forward on checked arguments (mean and b: null / undefined for RMSNorm).
template <Norm K>
void norm_forward(const char* op, Tensor& y, float* mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                  const Tensor& b, float eps, Tensor* amax, Tensor* row_amax) {
  const int C = static_cast<int>(w.dim(0));
  const int64_t N = rows_of(x);
  const Device dev = y.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  unsigned* pa = start_amax(op, amax, stream);
  unsigned* pr = start_amax(op, row_amax, stream);
  if (N == 0) return;
  const RowLayout rows = row_layout(C, kForwardMaxVpt);
  const bool rows_path = rows.vpt > 0 && aligned16(x.data_ptr()) && aligned16(y.data_ptr());
  const bool vec = C % 8 == 0 && aligned16(x.data_ptr()) && aligned16(y.data_ptr()) && aligned16(w.data_ptr()) &&
                   (!b.defined() || aligned16(b.data_ptr()));
  dispatch_pair(y.dtype(), x.dtype(), op, "y", [&](auto ty, auto tx) {
    dispatch_float(w.dtype(), op, "w", [&](auto tw) {
      using TX = decltype(tx);
      using TY = decltype(ty);
      using P = decltype(tw);
      TY* py = static_cast<TY*>(y.data_ptr());
      const TX* px = static_cast<const TX*>(x.data_ptr());
      const P* pw = static_cast<const P*>(w.data_ptr());
      const P* pb = b.defined() ? static_cast<const P*>(b.data_ptr()) : nullptr;
      if (rows_path) {
        auto kernel = row_kernel<PickForward, K, kForwardMaxVpt, TX, TY, P>(rows.vpt);
        const size_t smem = size_t{2} * C * sizeof(float);
        const int per_sm =
            static_cast<int64_t>(smem) <= max_shared_optin(dev) ? prepare_launch(kernel, rows.threads, smem, dev) : 0;
        if (per_sm > 0) {
          const int64_t wanted = (N + rows.slots - 1) / rows.slots;
          const int blocks = static_cast<int>(std::min<int64_t>(wanted, int64_t{per_sm} * sm_count(dev)));
          kernel<<<blocks, rows.threads, smem, stream>>>(py, mean, rstd.data<float>(), px, pw, pb, N, C, eps,
                                                         rows.team, pa, pr);
          TETRA_CUDA_CHECK_LAUNCH();
          return;
        }
      }
      const int blocks = static_cast<int>((N + kForwardWarps - 1) / kForwardWarps);
      auto kernel = vec ? norm_forward_kernel<K, 8, TX, TY, P> : norm_forward_kernel<K, 1, TX, TY, P>;
      kernel<<<blocks, kForwardWarps * 32, 0, stream>>>(py, mean, rstd.data<float>(), px, pw, pb, N, C, eps, pa, pr);
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
}

// The backward's launch: the row kernel (rows_path) or the per-warp fallback; the weight-gradient
// partials are [rows, blocks, C].
struct BackwardLaunch {
  bool rows_path = false;
  bool vec = false;  // the fallback's 8-wide loads (C % 8 == 0, every tensor 16-byte aligned)
  int stages = 2;  // the row kernel's staging buffers (TETRA_NORM_BACKWARD_STAGES)
  RowLayout rows;
  int blocks = 0, threads = 0;
  size_t smem = 0;
};

// Picks the backward's kernel and launch shape. aligned: every row tensor is 16-byte aligned.
template <Norm K>
BackwardLaunch plan_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& w, int64_t N,
                             bool aligned, bool wide_staging, bool with_sum) {
  const int C = static_cast<int>(w.dim(0));
  const Device dev = x.device();
  const int64_t optin = max_shared_optin(dev);
  BackwardLaunch l;
  l.vec = C % 8 == 0 && aligned && aligned16(w.data_ptr());
  l.rows = row_layout(C, kBackwardMaxVpt);
  l.stages = norm_backward_stages() == 1 && l.rows.threads <= kOneStageThreads ? 1 : 2;
  dispatch_pair(dy.dtype(), x.dtype(), op, "dy", [&](auto ta, auto tx) {
    dispatch_float(w.dtype(), op, "w", [&](auto tw) {
      using TA = decltype(ta);
      using TX = decltype(tx);
      using P = decltype(tw);
      if (l.rows.vpt <= 0 || !aligned) return;
      auto kernel = backward_row_kernel<K, kBackwardMaxVpt, TA, TX, P>(l.stages, l.rows.vpt);
      l.smem = backward_rows_smem(l.stages, l.rows.vpt, l.rows.threads, l.rows.slots, C, sizeof(TA), sizeof(TX),
                                  wide_staging, with_sum);
      const int per_sm =
          static_cast<int64_t>(l.smem) <= optin ? prepare_launch(kernel, l.rows.threads, l.smem, dev) : 0;
      if (per_sm <= 0) return;
      l.rows_path = true;
      l.threads = l.rows.threads;
      const int64_t wanted = (N + l.rows.slots - 1) / l.rows.slots;
      l.blocks = static_cast<int>(std::min<int64_t>(wanted, int64_t{per_sm} * sm_count(dev)));
    });
  });
  if (l.rows_path) return l;
  const int width = l.vec ? padded_width<8>(C) : padded_width<1>(C);
  const int64_t per_warp = int64_t{2} * width * static_cast<int64_t>(sizeof(float));
  if (per_warp > optin)
    TETRA_FAIL(Device, op, ": C = ", C, " needs ", per_warp, " bytes of shared memory per warp, more than the ",
               optin, " a block may have on ", dev.str());
  // 48 KB without opting in, less 1 KB for the kernel's static shared memory (block_amax_to's
  // per-warp maxima): dynamic + static past 48 KB fails the launch
  const int warps = static_cast<int>(std::clamp<int64_t>((47 * 1024) / per_warp, 1, 8));
  l.threads = warps * 32;
  l.smem = static_cast<size_t>(warps * per_warp);
  l.blocks = static_cast<int>(std::clamp<int64_t>((N + warps - 1) / warps, 1, 4 * sm_count(dev)));
  return l;
}

// Runs norm K's backward on checked arguments (mean: null, db undefined, dx_column_sum null for
// RMSNorm). Weight gradients always accumulate: dw += Σ_block partial[0], db += Σ_block partial[1].
template <Norm K>
void norm_backward(const char* op, Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                   const Tensor& w, const float* mean, const Tensor& rstd, bool accumulate_dx,
                   const Tensor* dresidual, Tensor* dx_column_sum, Tensor* dx_rounded, Tensor* dx_amax,
                   Tensor* dx_row_amax) {
  const int C = static_cast<int>(w.dim(0));
  const bool with_db = db.defined(), with_res = given(dresidual), with_sum = given(dx_column_sum);
  const bool with_rounded = given(dx_rounded);
  const int64_t N = rows_of(x);
  const Device dev = dx.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  unsigned* pa = start_amax(op, dx_amax, stream);
  unsigned* pr = start_amax(op, dx_row_amax, stream);
  if (N == 0) {
    if (with_sum) zero(*dx_column_sum);
    return;
  }

  const bool aligned = aligned16(x.data_ptr()) && aligned16(dy.data_ptr()) && aligned16(dx.data_ptr()) &&
                       (!with_res || aligned16(dresidual->data_ptr())) &&
                       (!with_rounded || aligned16(dx_rounded->data_ptr()));
  const BackwardLaunch l = plan_backward<K>(op, dy, x, w, N, aligned, with_res || accumulate_dx, with_sum);
  // The row kernel also sums dx (partial row 2); the fallback leaves that to a column sum of dx.
  // RMSNorm has dw's row alone.
  const bool fused_sum = with_sum && l.rows_path;
  const int partial_rows = K == Norm::Rms ? 1 : (fused_sum ? 3 : 2);
  Tensor partial = Tensor::empty({partial_rows, l.blocks, C}, DType::F32, dev);

  dispatch_pair(dy.dtype(), x.dtype(), op, "dy", [&](auto ta, auto tx) {
    dispatch_float(w.dtype(), op, "w", [&](auto tw) {
      using TA = decltype(ta);
      using TX = decltype(tx);
      using P = decltype(tw);
      TX* pdx = static_cast<TX*>(dx.data_ptr());
      TA* prounded = with_rounded ? static_cast<TA*>(dx_rounded->data_ptr()) : nullptr;
      const TA* pdy = static_cast<const TA*>(dy.data_ptr());
      const TX* px = static_cast<const TX*>(x.data_ptr());
      const P* pw = static_cast<const P*>(w.data_ptr());
      const TX* pres = with_res ? static_cast<const TX*>(dresidual->data_ptr()) : nullptr;
      if (l.rows_path) {
        auto kernel = backward_row_kernel<K, kBackwardMaxVpt, TA, TX, P>(l.stages, l.rows.vpt);
        kernel<<<l.blocks, l.threads, l.smem, stream>>>(pdx, prounded, partial.data<float>(), pdy, px, pw, mean,
                                                        rstd.data<float>(), pres, N, C, l.rows.team, accumulate_dx,
                                                        fused_sum, pa, pr);
      } else {
        auto kernel = l.vec ? norm_backward_kernel<K, 8, TA, TX, P> : norm_backward_kernel<K, 1, TA, TX, P>;
        if (l.smem > 47 * 1024)
          TETRA_CUDA_CHECK(
              cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(l.smem)));
        kernel<<<l.blocks, l.threads, l.smem, stream>>>(pdx, prounded, partial.data<float>(), pdy, px, pw, mean,
                                                        rstd.data<float>(), pres, N, C, accumulate_dx, pa, pr);
      }
      TETRA_CUDA_CHECK_LAUNCH();
    });
  });
  dispatch_float(dw.dtype(), op, "dw", [&](auto tg) {
    using TG = decltype(tg);
    const dim3 grid(static_cast<unsigned>((C + 31) / 32), fused_sum ? 3u : (with_db ? 2u : 1u));
    layernorm_weight_grad_kernel<TG><<<grid, dim3(32, kFoldRows), 0, stream>>>(
        static_cast<TG*>(dw.data_ptr()), with_db ? static_cast<TG*>(db.data_ptr()) : nullptr,
        fused_sum ? dx_column_sum->data<float>() : nullptr, partial.data<float>(), l.blocks, C);
    TETRA_CUDA_CHECK_LAUNCH();
  });
  if (with_sum && !fused_sum) column_sum(*dx_column_sum, dx, N, C, /*accumulate=*/false);
}

// The checks of dx, dy, dresidual, dx_rounded and dw both backwards share.
void check_backward_args(const char* op, const char* norm, const Tensor& dx, const Tensor& dw, const Tensor& dy,
                         const Tensor& x, int C, bool accumulate_dx, const Tensor* dresidual,
                         const Tensor* dx_rounded) {
  check_cuda_float(op, "x", x);
  check_last_dim(op, "x", x, C);
  check_act(op, "dy", dy, x);
  check_cuda_float(op, "dx", dx);
  check_dtype(op, "dx", dx, x.dtype());
  check_shape(op, "dx", dx, x.shape());
  if (dy.dtype() != dx.dtype()) check_disjoint(op, "dy", dx, dy);  // dx may alias dy of its own dtype only
  check_cuda_float(op, "dw", dw);
  check_shape(op, "dw", dw, {C});
  if (given(dresidual)) {
    if (accumulate_dx)
      TETRA_FAIL(Internal, op, ": accumulate_dx must be false with a dresidual (dx = dresidual + the ", norm,
                 "'s gradient; to add to dx, pass dx itself as dresidual)");
    check_cuda_float(op, "dresidual", *dresidual);
    check_dtype(op, "dresidual", *dresidual, dx.dtype());
    check_shape(op, "dresidual", *dresidual, x.shape());
  }
  if (given(dx_rounded)) {  // dx in dy's dtype: only where that differs from dx's (else a copy of dx)
    check_cuda_float(op, "dx_rounded", *dx_rounded);
    check_dtype(op, "dx_rounded", *dx_rounded, dy.dtype());
    if (dx_rounded->dtype() == dx.dtype())
      TETRA_FAIL(Internal, op, ": dx_rounded ", dx_rounded->describe(),
                 " has dx's dtype: it would be a copy of dx (pass none)");
    check_shape(op, "dx_rounded", *dx_rounded, x.shape());
    check_disjoint(op, "dx", *dx_rounded, dx);
    check_disjoint(op, "dy", *dx_rounded, dy);
    if (given(dresidual)) check_disjoint(op, "dresidual", *dx_rounded, *dresidual);
  }
}

void check_rstd(const char* op, const Tensor& rstd, const Tensor& x) {
  check_cuda_tensor(op, "rstd", rstd);
  check_dtype(op, "rstd", rstd, DType::F32);
  check_shape(op, "rstd", rstd, leading_shape(x));
}

}  // namespace

void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps, Tensor* amax) {
  const char* op = "layernorm_forward";
  check_params(op, w, b);
  const int C = channels(op, w.dim(0));
  check_cuda_float(op, "x", x);
  check_last_dim(op, "x", x, C);
  check_act(op, "y", y, x);
  check_stats(op, mean, rstd, x);
  if (!(eps >= 0.0f)) TETRA_FAIL(Internal, op, ": eps must be ≥ 0, got ", eps);
  norm_forward<Norm::Layer>(op, y, mean.data<float>(), rstd, x, w, b, eps, amax, nullptr);
}

void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd, bool accumulate_dx, const Tensor* dresidual,
                        Tensor* dx_column_sum, Tensor* dx_rounded, Tensor* dx_amax) {
  const char* op = "layernorm_backward";
  check_params(op, w, Tensor());
  const int C = channels(op, w.dim(0));
  check_backward_args(op, "LayerNorm", dx, dw, dy, x, C, accumulate_dx, dresidual, dx_rounded);
  if (db.defined()) {  // a LayerNorm without bias passes an undefined db
    check_cuda_float(op, "db", db);
    check_dtype(op, "db", db, dw.dtype());
    check_shape(op, "db", db, {C});
  }
  check_stats(op, mean, rstd, x);
  if (given(dx_column_sum)) {
    check_cuda_tensor(op, "dx_column_sum", *dx_column_sum);
    check_dtype(op, "dx_column_sum", *dx_column_sum, DType::F32);
    check_shape(op, "dx_column_sum", *dx_column_sum, {C});
  }
  norm_backward<Norm::Layer>(op, dx, dw, db, dy, x, w, mean.data<float>(), rstd, accumulate_dx, dresidual,
                             dx_column_sum, dx_rounded, dx_amax, nullptr);
}

void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps, Tensor* amax,
                     Tensor* row_amax) {
  const char* op = "rmsnorm_forward";
  check_params(op, w, Tensor());
  const int C = channels(op, w.dim(0));
  check_cuda_float(op, "x", x);
  check_last_dim(op, "x", x, C);
  check_act(op, "y", y, x);
  check_rstd(op, rstd, x);
  if (!(eps >= 0.0f)) TETRA_FAIL(Internal, op, ": eps must be ≥ 0, got ", eps);
  norm_forward<Norm::Rms>(op, y, nullptr, rstd, x, w, Tensor(), eps, amax, row_amax);
}

void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      bool accumulate_dx, const Tensor* dresidual, Tensor* dx_rounded, Tensor* dx_amax,
                      Tensor* dx_row_amax) {
  const char* op = "rmsnorm_backward";
  check_params(op, w, Tensor());
  const int C = channels(op, w.dim(0));
  check_backward_args(op, "RMSNorm", dx, dw, dy, x, C, accumulate_dx, dresidual, dx_rounded);
  check_rstd(op, rstd, x);
  Tensor no_db;
  norm_backward<Norm::Rms>(op, dx, dw, no_db, dy, x, w, nullptr, rstd, accumulate_dx, dresidual, nullptr,
                           dx_rounded, dx_amax, dx_row_amax);
}

}  // namespace tetra::cuda
