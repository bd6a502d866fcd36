// The grouped FP8 expert GEMMs' blockwise casts (DeepSeek-V3's scales: runtime/ops.h Rows1x128 for
// rows and gradients, Blocks128 for weights) in the layouts of the tensor-core kernel
// (GroupedGemm::blockwise, runtime/cuda/moe_grouped_gemm.h), each value as the CPU twin's per-expert
// casts (runtime/cpu/moe_grouped_linear.cpp) give it:
//   Forward         x [R, I] rows 1×128          w [G·O, I] in 128×128 blocks (O a multiple of 128:
//                                                 no block spans two experts, so one cast of the stack)
//   BackwardInput   dy [R, O] rows 1×128         the stack transposed, [I, G·O] (expert g's wᵀ at
//                                                 columns g·O): its blocks transposed, one cast
//   BackwardWeight  dyᵀ [O, Rp], xᵀ [I, Rp]: 128×1 runs down each expert's rows, counted from the
//                   expert's first row (its padded start po[g], a multiple of 128), zero codes after
//                   its rows (expert_runs_cast_t_kernel)
// A row's 1×128 scales do not depend on its expert, so the row operands are cast whole. Everything
// runs from the offsets in device memory (no host synchronisation).
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/fp8_device.cuh"
#include "runtime/cuda/moe_grouped_fp8.h"
#include "runtime/cuda/moe_grouped_tiles.cuh"
#include "runtime/fp8_cast_shape.h"

namespace tetra::cuda {

namespace {

constexpr int kRun = ops::kFp8Block;  // 128 padded rows a run (one scale a column)

// The expert whose padded rows [po[g], po[g + 1]) hold padded row p, or −1 past po[G].
__device__ int expert_of_padded_row(const int32_t* po, int G, int64_t p) {
  return p >= po[G] ? -1 : last_start_at_or_before(po, G, p);
}

// The transposed runs' block: 256 threads, one run of 128 padded rows (blockIdx.x, all of one expert)
// × kRunCols columns (blockIdx.y): 256 bytes of a row, 128 bf16 or 64 fp32 values.
constexpr int kRunThreads = 256;
template <class T>
constexpr int kRunCols = 256 / static_cast<int>(sizeof(T));

// The real rows [first, first + n) of x that a run of padded rows starting at p0 holds (n = 0 for
// the padding after an expert's rows and after po[G]).
struct RunRows {
  int64_t first;
  int n;
};
__device__ RunRows run_rows(const int32_t* offsets, const int32_t* po, int G, int64_t p0) {
  const int g = expert_of_padded_row(po, G, p0);
  if (g < 0) return {0, 0};
  const int64_t j0 = p0 - po[g], m = offsets[g + 1] - offsets[g];
  const int64_t n = m - j0 < kRun ? m - j0 : kRun;
  return {offsets[g] + j0, n > 0 ? static_cast<int>(n) : 0};
}

// The run's rows are staged in shared memory with 16-byte loads (a warp reads two rows' 256
// contiguous bytes; zeros past the run's real rows); each column's max is folded from kParts slices
// of its rows; then a thread casts 16 rows of one column into one 16-byte store of q_t's row c, and
// writes the scale.
// The shared-memory reads take one row's consecutive columns a warp (no bank conflicts).
template <class T>
__global__ void __launch_bounds__(kRunThreads)
    expert_runs_cast_t_kernel(const T* x, int64_t C, const int32_t* offsets, const int32_t* po, int G, int64_t Rp,
                              Fp8Format format, float largest, unsigned char* q_t, float* scale_t, int64_t scale_ld) {
  constexpr int kCols = kRunCols<T>, kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kParts = kRunThreads / kCols, kPartRows = kRun / kParts;
  __shared__ __align__(16) T tile[kRun][kCols];
  __shared__ unsigned part_max[kParts][kCols];
  __shared__ RunRows run;
  const int64_t p0 = static_cast<int64_t>(blockIdx.x) * kRun, c0 = static_cast<int64_t>(blockIdx.y) * kCols;
  if (threadIdx.x == 0) run = run_rows(offsets, po, G, p0);
  __syncthreads();
  const RunRows rows = run;
  for (int v = threadIdx.x; v < kRun * kCols / kVec; v += kRunThreads) {
    const int r = v / (kCols / kVec), cv = v % (kCols / kVec) * kVec;
    uint4 word = make_uint4(0, 0, 0, 0);
    if (r < rows.n && c0 + cv < C) word = *reinterpret_cast<const uint4*>(x + (rows.first + r) * C + c0 + cv);
    *reinterpret_cast<uint4*>(&tile[r][cv]) = word;
  }
  __syncthreads();
  const int c = threadIdx.x % kCols, part = threadIdx.x / kCols;
  unsigned amax = 0;
  for (int r = part * kPartRows; r < (part + 1) * kPartRows; ++r) amax = max(amax, abs_bits(to_f32(tile[r][c])));
  part_max[part][c] = amax;
  __syncthreads();
#pragma unroll
  for (int q = 0; q < kParts; ++q) amax = max(amax, part_max[q][c]);
  if (c0 + c >= C) return;
  const float factor = fp8_quant_factor(__uint_as_float(amax), largest);
  uint4* dst = reinterpret_cast<uint4*>(q_t + (c0 + c) * Rp + p0);
  constexpr int kChunks = kRun / 16 / kParts;  // 16-row chunks a thread
#pragma unroll 1
  for (int v = part * kChunks; v < (part + 1) * kChunks; ++v) {
    unsigned word[4] = {0, 0, 0, 0};
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const int j = v * 16 + e;
      const unsigned code = j < rows.n ? fp8_code(to_f32(tile[j][c]), factor, format) : 0u;
      word[e / 4] |= code << (8 * (e % 4));
    }
    dst[v] = make_uint4(word[0], word[1], word[2], word[3]);
  }
  if (part == 0) scale_t[(p0 / kRun) * scale_ld + c0 + c] = 1.0f / factor;
}

template <class T>
void launch_runs_cast(const T* x, int64_t C, const int32_t* offsets, const int32_t* po, int G, int64_t Rp,
                      Fp8Format f, unsigned char* q, float* s, int64_t scale_ld, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(Rp / kRun), static_cast<unsigned>((C + kRunCols<T> - 1) / kRunCols<T>));
  expert_runs_cast_t_kernel<<<grid, kRunThreads, 0, stream>>>(x, C, offsets, po, G, Rp, f, fp8_largest(f), q, s,
                                                              scale_ld);
}

}  // namespace

ExpertCodes cast_expert_runs_transposed(const Tensor& x, DType format, const int32_t* offsets,
                                        const int32_t* padded_offsets, int G, int64_t Rp, cudaStream_t stream,
                                        const char* op) {
  const int64_t C = x.dim(1);
  if (Rp % kRun != 0 || C % 16 != 0)
    TETRA_FAIL(Internal, op, ": the transposed runs need Rp a multiple of 128 and ", C, " columns a multiple of 16");
  const Shape scale_shape = fp8_scale_shape(ops::Fp8Scaling::Rows1x128, C, Rp);  // [Rp/128, padded C]
  ExpertCodes out{Tensor::empty({C, Rp}, format, x.device()), Tensor::zeros(scale_shape, DType::F32, x.device())};
  if (Rp == 0 || C == 0) return out;
  if (!aligned16(x.data_ptr()))
    TETRA_FAIL(Internal, op, ": the transposed runs read 16-byte vectors; the operand starts off a 16-byte boundary");
  const Fp8Format f = fp8_format_of(format);
  auto* q = static_cast<unsigned char*>(out.q.data_ptr());
  float* s = out.scale.data<float>();
  if (x.dtype() == DType::BF16)
    launch_runs_cast(static_cast<const bf16*>(x.data_ptr()), C, offsets, padded_offsets, G, Rp, f, q, s,
                     scale_shape[1], stream);
  else
    launch_runs_cast(x.data<float>(), C, offsets, padded_offsets, G, Rp, f, q, s, scale_shape[1], stream);
  TETRA_CUDA_CHECK_LAUNCH();
  return out;
}

namespace {

// A row operand [R, K] cast whole in 1×128 groups: codes [R, K] and scales [K/128, padded R].
ExpertCodes rows_1x128(const Tensor& x, DType format) {
  ExpertCodes out{Tensor::empty(x.shape(), format, x.device()),
                  Tensor::empty(fp8_scale_shape(ops::Fp8Scaling::Rows1x128, x.dim(0), x.dim(1)), DType::F32,
                                x.device())};
  ops::fp8_quantize(out.q, out.scale, x, ops::Fp8Scaling::Rows1x128);
  return out;
}

// The stacked weights w [G, O, I] as one [G·O, I] in 128×128 blocks (O a multiple of 128: no block
// spans two experts): codes [G·O, I] with scales [G·O/128, padded I/128] (transposed false), or the
// stack's transposed codes [I, G·O] with scales [I/128, padded G·O/128] (expert g's wᵀ is columns
// g·O … g·O + O − 1 of them; the untransposed codes of that cast are a scratch tensor).
ExpertCodes weight_blocks(const Tensor& w, DType format, bool transposed) {
  const int64_t G = w.dim(0), O = w.dim(1), I = w.dim(2);
  const ops::Fp8Scaling blocks = ops::Fp8Scaling::Blocks128;
  const Tensor stack = w.slice_flat(0, {G * O, I});
  ExpertCodes rows{Tensor::empty({G * O, I}, format, w.device()),
                   Tensor::empty(fp8_scale_shape(blocks, G * O, I), DType::F32, w.device())};
  if (!transposed) {
    ops::fp8_quantize(rows.q, rows.scale, stack, blocks);
    return rows;
  }
  ExpertCodes out{Tensor::empty({I, G * O}, format, w.device()),
                  Tensor::empty(fp8_scale_shape(blocks, I, G * O), DType::F32, w.device())};
  ops::fp8_quantize(rows.q, rows.scale, stack, blocks, &out.q, &out.scale);
  return out;
}

// The same codes out of a stack cast ahead (ops::Fp8GroupedCodes, Blocks128; ops.cpp checked their
// shapes): q as [G·O, I] with its scales, or q_t [I, G·O] with scale_t.
ExpertCodes weight_blocks_given(const ops::Fp8GroupedCodes& codes, bool transposed, const char* op) {
  const Tensor& q = transposed ? codes.q_t : codes.q;
  if (!q.defined())
    TETRA_FAIL(Internal, op, ": the weights' blocks cast ahead lack the ", transposed ? "transposed " : "", "layout");
  if (!transposed) return {q.view({q.dim(0) * q.dim(1), q.dim(2)}), codes.scale};
  return {q, codes.scale_t};
}

}  // namespace

void cast_grouped_fp8_blockwise(GroupedFp8Call& call, const Tensor& a, ops::Fp8Cast a_cast, const Tensor& b,
                                ops::Fp8Cast b_cast, const ops::Fp8GroupedCodes* b_codes, cudaStream_t stream) {
  GroupedGemm& p = call.p;
  const bool weight_kind = p.kind == GroupedGemmKind::BackwardWeight;
  const ops::Fp8Scaling b_wants = weight_kind ? ops::Fp8Scaling::Rows1x128 : ops::Fp8Scaling::Blocks128;
  if (a_cast.scaling != ops::Fp8Scaling::Rows1x128 || b_cast.scaling != b_wants)
    TETRA_FAIL(Internal, p.op, ": blockwise grouped GEMMs take 1×128 rows and ",
               weight_kind ? "1×128 rows" : "128×128 weight blocks");
  if (!a.defined() || (!b.defined() && !b_codes))
    TETRA_FAIL(Internal, p.op, ": blockwise grouped GEMMs cast their row operands themselves (no codes cast ahead)");
  const char* why = nullptr;
  p.blockwise = true;
  p.fp8_transposed = true;
  static const float kNoScale = 1.0f;  // the check asks only whether scales exist; set below
  p.a_scale = p.b_scale = &kNoScale;
  if (!grouped_gemm_fp8_wgmma_applies(p, &why))
    TETRA_FAIL(Config, p.op, ": blockwise FP8 expert GEMMs run only on Hopper's tensor-core kernel, which does not "
               "apply here: ", why);
  if (weight_kind) {
    call.po = padded_offsets(p.offsets, static_cast<int>(p.G), p.R, a.device(), stream);
    p.padded_offsets = call.po.data<int32_t>();
    p.Rp = grouped_gemm_fp8_padded_rows(p.R, p.G);
    call.qa = cast_expert_runs_transposed(a, a_cast.format, p.offsets, p.padded_offsets, static_cast<int>(p.G), p.Rp,
                                          stream, p.op);
    call.qb = cast_expert_runs_transposed(b, b_cast.format, p.offsets, p.padded_offsets, static_cast<int>(p.G), p.Rp,
                                          stream, p.op);
  } else {
    const bool transposed = p.kind == GroupedGemmKind::BackwardInput;
    call.qa = rows_1x128(a, a_cast.format);
    call.qb = b_codes ? weight_blocks_given(*b_codes, transposed, p.op) : weight_blocks(b, b_cast.format, transposed);
  }
  p.a = call.qa.q.data_ptr(), p.b = call.qb.q.data_ptr();
  p.a_scale = call.qa.scale.data<float>(), p.b_scale = call.qb.scale.data<float>();
  p.a_scale_ld = call.qa.scale.dim(1), p.b_scale_ld = call.qb.scale.dim(1);
}

}  // namespace tetra::cuda
