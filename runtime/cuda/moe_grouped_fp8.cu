// CUDA grouped FP8 expert GEMMs (runtime/ops.h moe_grouped_fp8_*), Tensorwise: one scale per
// expert's rows and one per expert's weight, the CPU twin's (runtime/cpu/moe_grouped_linear.cpp)
// codes and scales bit for bit. Everything runs from the offsets in device memory (no host
// synchronisation; a CUDA graph captures it):
//   1. amax: each block takes up to kRows rows of one expert (the row tensors: the grouped GEMMs'
//      tile list, runtime/cuda/moe_grouped_tiles.cuh; the weights: blockIdx.y the expert), folds the
//      bits of |x| (block_amax_to: one atomicMax per block) into amax[g];
//   2. scales: s[g] = 1 / fp8_quant_factor(amax[g]) for every expert (empty ones too: a weight
//      gradient of an expert without rows multiplies its zero sums by a finite scale);
//   3. codes: the same blocks write fp8(x·r[g]) into a code tensor of x's shape;
//   4. the grouped GEMM on the codes (grouped_gemm_fp8, runtime/cuda/moe_grouped_gemm.h), scaled per
//      expert in its epilogue.
// Codes and scales are temporary tensors of the call (stream-ordered). Rows1x128 and Blocks128 have
// no CUDA kernels yet (an Internal error; the config refuses them with routed experts on a GPU).
#include <algorithm>

#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/fp8_device.cuh"
#include "runtime/cuda/kernel_common.cuh"
#include "runtime/cuda/moe_grouped_gemm.h"
#include "runtime/cuda/moe_grouped_tiles.cuh"
#include "runtime/moe_shape.h"

namespace tetra::cuda {

namespace {

constexpr int kRows = 16, kThreads = 256;

// The segments of a [rows, cols] tensor that are cast apart: the experts' rows of a row tensor (from
// the offsets) or the G weights w[g], O rows each.
struct Segments {
  const int32_t* offsets = nullptr;  // row tensors; null for weights
  int G = 0;
  int64_t R = 0;       // rows of a row tensor
  int64_t O = 0;       // weights: rows per expert
  int64_t cols = 0;
};

struct Span {
  int g;
  int64_t begin, end;  // rows [begin, end) of expert g
  bool valid;
};

// This block's rows (every thread gets the same; locate_tile synchronises the block).
__device__ Span block_span(const Segments& s) {
  if (!s.offsets) {
    const int g = blockIdx.y;
    const int64_t begin = g * s.O + int64_t{blockIdx.x} * kRows, end = min(begin + kRows, (g + 1) * s.O);
    return {g, begin, end, begin < end};
  }
  const TileAt t = locate_tile<GroupedGemmKind::Forward, kRows>(s.offsets, s.G, s.R, 0, 1, nullptr);
  if (!t.valid) return {0, 0, 0, false};
  int64_t r0, r1;
  group_rows(s.offsets, t.g, s.R, &r0, &r1);
  const int64_t begin = r0 + t.m_tile * kRows;
  return {t.g, begin, min(begin + kRows, r1), true};
}

template <class T>
__global__ void __launch_bounds__(kThreads) segment_amax_kernel(const T* __restrict__ x, Segments s, unsigned* amax) {
  const Span sp = block_span(s);
  if (!sp.valid) return;  // the whole block
  unsigned m = 0;
  for (int64_t i = sp.begin * s.cols + threadIdx.x; i < sp.end * s.cols; i += kThreads)
    m = max(m, abs_bits(to_f32(x[i])));
  block_amax_to(amax + sp.g, m);
}

// scale[g] = 1 / r[g], as fp8_quantize writes a Tensorwise scale.
__global__ void segment_scale_kernel(const unsigned* amax, int G, Fp8Format f, float* scale) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < G) scale[g] = 1.0f / fp8_quant_factor(__uint_as_float(amax[g]), fp8_largest(f));
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    segment_cast_kernel(const T* __restrict__ x, Segments s, const unsigned* amax, Fp8Format f, unsigned char* q) {
  const Span sp = block_span(s);
  if (!sp.valid) return;
  const float r = fp8_quant_factor(__uint_as_float(amax[sp.g]), fp8_largest(f));
  for (int64_t i = sp.begin * s.cols + threadIdx.x; i < sp.end * s.cols; i += kThreads)
    q[i] = fp8_code(to_f32(x[i]), r, f);
}

// One operand cast per expert: codes of x's shape (format c.format) and scale [G].
struct ExpertCodes {
  Tensor q, scale;
};

ExpertCodes cast_segments(const Tensor& x, ops::Fp8Cast c, const Segments& s, Device dev, cudaStream_t stream,
                          const char* op) {
  ExpertCodes out{Tensor::empty(x.shape(), c.format, dev), Tensor::empty({s.G}, DType::F32, dev)};
  Tensor amax = Tensor::empty({s.G}, DType::U32, dev);
  TETRA_CUDA_CHECK(cudaMemsetAsync(amax.data_ptr(), 0, amax.nbytes(), stream));
  const Fp8Format f = fp8_format_of(c.format);
  const dim3 grid = s.offsets ? dim3(static_cast<unsigned>((s.R + kRows - 1) / kRows + s.G))
                              : dim3(static_cast<unsigned>((s.O + kRows - 1) / kRows), static_cast<unsigned>(s.G));
  unsigned* pa = static_cast<unsigned*>(amax.data_ptr());
  dispatch_float(x.dtype(), op, "an operand", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    if (grid.x > 0 && s.cols > 0) {
      segment_amax_kernel<T><<<grid, kThreads, 0, stream>>>(px, s, pa);
      TETRA_CUDA_CHECK_LAUNCH();
    }
    segment_scale_kernel<<<(s.G + 127) / 128, 128, 0, stream>>>(pa, s.G, f, out.scale.data<float>());
    TETRA_CUDA_CHECK_LAUNCH();
    if (grid.x > 0 && s.cols > 0) {
      unsigned char* q = static_cast<unsigned char*>(out.q.data_ptr());
      segment_cast_kernel<T><<<grid, kThreads, 0, stream>>>(px, s, pa, f, q);
      TETRA_CUDA_CHECK_LAUNCH();
    }
  });
  return out;
}

void check_operands(const char* op, const Tensor& c, const Tensor& a, ops::Fp8Cast a_cast, const Tensor& b,
                    ops::Fp8Cast b_cast, const Tensor& offsets) {
  check_cuda_float(op, "the output", c);
  check_cuda_float(op, "a row operand", a);
  check_cuda_float(op, "the other operand", b);
  check_cuda_tensor(op, "offsets", offsets);
  for (const ops::Fp8Cast& cast : {a_cast, b_cast}) {
    if (cast.format != DType::F8E4M3 && cast.format != DType::F8E5M2)
      TETRA_FAIL(Internal, op, ": a cast's format is ", dtype_name(cast.format), ", not F8E4M3 or F8E5M2");
    if (cast.scaling != ops::Fp8Scaling::Tensorwise)
      TETRA_FAIL(Internal, op, ": only Tensorwise casts have CUDA kernels (Rows1x128 and Blocks128 run on CPU ranks)");
  }
}

Segments rows_of(const Tensor& x, const MoeGemmDims& d, const Tensor& offsets) {
  Segments s;
  s.offsets = offsets.data<int32_t>();
  s.G = static_cast<int>(d.G);
  s.R = d.R;
  s.cols = x.dim(1);
  return s;
}

Segments weights_of(const MoeGemmDims& d) {
  Segments s;
  s.G = static_cast<int>(d.G);
  s.O = d.O;
  s.cols = d.I;
  return s;
}

// c (+)= a ∘ b in `kind`'s layout, both cast per expert.
void run(const char* op, GroupedGemmKind kind, const MoeGemmDims& d, Tensor& c, const Tensor& a, ops::Fp8Cast a_cast,
         const Segments& a_segs, const Tensor& b, ops::Fp8Cast b_cast, const Segments& b_segs, const Tensor& offsets,
         bool accumulate = false) {
  const Device dev = c.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  const ExpertCodes qa = cast_segments(a, a_cast, a_segs, dev, stream, op);
  const ExpertCodes qb = cast_segments(b, b_cast, b_segs, dev, stream, op);
  GroupedGemm p;
  p.kind = kind;
  p.G = d.G, p.R = d.R, p.O = d.O, p.I = d.I;
  p.offsets = offsets.data<int32_t>();
  p.a = qa.q.data_ptr(), p.b = qb.q.data_ptr(), p.c = c.data_ptr();
  p.ab_type = a_cast.format, p.b_fp8 = b_cast.format, p.c_type = c.dtype();
  p.a_scale = qa.scale.data<float>(), p.b_scale = qb.scale.data<float>();
  p.accumulate = accumulate;
  p.op = op;
  grouped_gemm_fp8(p, dev, stream);
}

}  // namespace

void moe_grouped_fp8_forward(Tensor& y, const Tensor& x, ops::Fp8Cast x_cast, const Tensor& w, ops::Fp8Cast w_cast,
                             const Tensor& offsets) {
  const char* op = "moe_grouped_fp8_forward";
  const MoeGemmDims d = check_moe_grouped_forward(op, y, x, w, offsets);
  check_operands(op, y, x, x_cast, w, w_cast, offsets);
  if (d.G == 0 || d.R == 0 || d.O == 0) return;
  run(op, GroupedGemmKind::Forward, d, y, x, x_cast, rows_of(x, d, offsets), w, w_cast, weights_of(d), offsets);
}

void moe_grouped_fp8_backward_input(Tensor& dx, const Tensor& dy, ops::Fp8Cast dy_cast, const Tensor& w,
                                    ops::Fp8Cast w_cast, const Tensor& offsets) {
  const char* op = "moe_grouped_fp8_backward_input";
  const MoeGemmDims d = check_moe_grouped_backward_input(op, dx, dy, w, offsets);
  check_operands(op, dx, dy, dy_cast, w, w_cast, offsets);
  if (d.G == 0 || d.R == 0 || d.I == 0) return;
  run(op, GroupedGemmKind::BackwardInput, d, dx, dy, dy_cast, rows_of(dy, d, offsets), w, w_cast, weights_of(d),
      offsets);
}

void moe_grouped_fp8_backward_weight(Tensor& dw, const Tensor& dy, ops::Fp8Cast dy_cast, const Tensor& x,
                                     ops::Fp8Cast x_cast, const Tensor& offsets, bool accumulate) {
  const char* op = "moe_grouped_fp8_backward_weight";
  const MoeGemmDims d = check_moe_grouped_backward_weight(op, dw, dy, x, offsets);
  check_operands(op, dw, dy, dy_cast, x, x_cast, offsets);
  if (d.G == 0 || d.O == 0 || d.I == 0) return;
  run(op, GroupedGemmKind::BackwardWeight, d, dw, dy, dy_cast, rows_of(dy, d, offsets), x, x_cast,
      rows_of(x, d, offsets), offsets, accumulate);
}

}  // namespace tetra::cuda
