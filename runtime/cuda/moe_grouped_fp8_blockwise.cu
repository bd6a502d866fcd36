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
// A row's 1×128 scales do not depend on its expert, so the row operands are cast whole. Operands cast
// ahead (ops::Fp8GroupedCodes: a row tensor's rows and runs from one read, cast_blockwise_row_codes;
// the weights' stack once a step) are read in place of these casts. Everything runs from the offsets
// in device memory (no host synchronisation).
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

// Where each expert's rows lie: offsets [G + 1] into x's R rows (clamped to [0, R] as group_rows does)
// and the padded offsets po [G + 1] of the transposed layout, Rp columns.
struct RunGeometry {
  const int32_t* offsets;
  const int32_t* po;
  int G;
  int64_t R, Rp;
};

// The real rows [first, first + n) of x that a run of padded rows starting at p0 holds (n = 0 for
// the padding after an expert's rows and after po[G]).
struct RunRows {
  int64_t first;
  int n;
};
__device__ RunRows run_rows(const RunGeometry& geo, int64_t p0) {
  const int g = expert_of_padded_row(geo.po, geo.G, p0);
  if (g < 0) return {0, 0};
  int64_t r0, r1;
  group_rows(geo.offsets, g, geo.R, &r0, &r1);
  const int64_t j0 = p0 - geo.po[g], n = min(r1 - r0 - j0, int64_t{kRun});
  return {r0 + j0, n > 0 ? static_cast<int>(n) : 0};
}

// Where the runs' kernel also writes each real row's 1×128 codes (bf16 x only: a block's 128 columns
// are then one group of each row): q [R, C] and scales [C/128, ld] (the row r's scale at column r).
struct RowCodesOut {
  unsigned char* q = nullptr;
  float* scale = nullptr;
  int64_t ld = 0;
};

// The 1×128 codes of the staged rows [0, n) of a 128-column tile (bf16): a warp a row at a time, a
// lane 4 values (the warp reads the row's 256 contiguous bytes of shared memory: no bank conflicts),
// the row's amax folded across the warp; codes and scale as fp8_quantize's Rows1x128 writes them.
template <class T, int kCols>
__device__ void cast_staged_rows(const T (&tile)[kRun][kCols], RunRows rows, int64_t C, int64_t c0, Fp8Format format,
                                 float largest, const RowCodesOut& out) {
  static_assert(kCols == ops::kFp8Block, "a tile's columns are one 1×128 group of each row");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < rows.n; r += kRunThreads / 32) {
    float v[4];
    unsigned amax = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[e] = to_f32(tile[r][lane * 4 + e]);
      amax = max(amax, abs_bits(v[e]));
    }
#pragma unroll
    for (int d = 16; d > 0; d /= 2) amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, d));
    const float factor = fp8_quant_factor(__uint_as_float(amax), largest);
    unsigned word = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) word |= static_cast<unsigned>(fp8_code(v[e], factor, format)) << (8 * e);
    const int64_t row = rows.first + r;
    *reinterpret_cast<unsigned*>(out.q + row * C + c0 + lane * 4) = word;
    if (lane == 0) out.scale[(c0 / ops::kFp8Block) * out.ld + row] = 1.0f / factor;
  }
}

// The run's rows are staged in shared memory with 16-byte loads (a warp reads two rows' 256
// contiguous bytes; zeros past the run's real rows); each column's max is folded from kParts slices
// of its rows; then a thread casts 16 rows of one column into one 16-byte store of q_t's row c, and
// writes the scale. With kRows, the real rows' 1×128 codes are written from the same stage
// (cast_staged_rows), so that one read of x gives both of a row tensor's blockwise layouts.
// The shared-memory reads take one row's consecutive columns a warp (no bank conflicts).
template <class T, bool kRows>
__global__ void __launch_bounds__(kRunThreads)
    expert_runs_cast_t_kernel(const T* x, int64_t C, RunGeometry geo, Fp8Format format, float largest,
                              unsigned char* q_t, float* scale_t, int64_t scale_ld, RowCodesOut row_codes) {
  constexpr int kCols = kRunCols<T>, kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kParts = kRunThreads / kCols, kPartRows = kRun / kParts;
  __shared__ __align__(16) T tile[kRun][kCols];
  __shared__ unsigned part_max[kParts][kCols];
  __shared__ RunRows run;
  const int64_t p0 = static_cast<int64_t>(blockIdx.x) * kRun, c0 = static_cast<int64_t>(blockIdx.y) * kCols;
  if (threadIdx.x == 0) run = run_rows(geo, p0);
  __syncthreads();
  const RunRows rows = run;
  for (int v = threadIdx.x; v < kRun * kCols / kVec; v += kRunThreads) {
    const int r = v / (kCols / kVec), cv = v % (kCols / kVec) * kVec;
    uint4 word = make_uint4(0, 0, 0, 0);
    if (r < rows.n && c0 + cv < C) word = *reinterpret_cast<const uint4*>(x + (rows.first + r) * C + c0 + cv);
    *reinterpret_cast<uint4*>(&tile[r][cv]) = word;
  }
  __syncthreads();
  if constexpr (kRows) cast_staged_rows(tile, rows, C, c0, format, largest, row_codes);
  const int c = threadIdx.x % kCols, part = threadIdx.x / kCols;
  unsigned amax = 0;
  for (int r = part * kPartRows; r < (part + 1) * kPartRows; ++r) amax = max(amax, abs_bits(to_f32(tile[r][c])));
  part_max[part][c] = amax;
  __syncthreads();
#pragma unroll
  for (int q = 0; q < kParts; ++q) amax = max(amax, part_max[q][c]);
  if (c0 + c >= C) return;
  const float factor = fp8_quant_factor(__uint_as_float(amax), largest);
  uint4* dst = reinterpret_cast<uint4*>(q_t + (c0 + c) * geo.Rp + p0);
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
void launch_runs_cast(const T* x, int64_t C, const RunGeometry& geo, Fp8Format f, unsigned char* q, float* s,
                      int64_t scale_ld, cudaStream_t stream, const RowCodesOut* rows = nullptr) {
  const dim3 grid(static_cast<unsigned>(geo.Rp / kRun), static_cast<unsigned>((C + kRunCols<T> - 1) / kRunCols<T>));
  if constexpr (kRunCols<T> == ops::kFp8Block) {
    if (rows) {
      expert_runs_cast_t_kernel<T, true><<<grid, kRunThreads, 0, stream>>>(x, C, geo, f, fp8_largest(f),
                                                                           q, s, scale_ld, *rows);
      return;
    }
  }
  expert_runs_cast_t_kernel<T, false><<<grid, kRunThreads, 0, stream>>>(x, C, geo, f, fp8_largest(f),
                                                                        q, s, scale_ld, RowCodesOut{});
}

// cast_expert_runs_transposed, and with `rows` (bf16 x) each real row's 1×128 codes from the same read.
ExpertCodes runs_cast(const Tensor& x, DType format, const int32_t* offsets, const int32_t* padded_offsets, int G,
                      int64_t Rp, cudaStream_t stream, const char* op, const RowCodesOut* rows) {
  const int64_t C = x.dim(1);
  if (Rp % kRun != 0 || C % 16 != 0)
    TETRA_FAIL(Internal, op, ": the transposed runs need Rp a multiple of 128 and ", C, " columns a multiple of 16");
  const Shape scale_shape = fp8_scale_shape(ops::Fp8Scaling::Rows1x128, C, Rp);  // [Rp/128, padded C]
  ExpertCodes out{Tensor::empty({C, Rp}, format, x.device()), Tensor::zeros(scale_shape, DType::F32, x.device())};
  if (Rp == 0 || C == 0) return out;
  if (!aligned16(x.data_ptr()))
    TETRA_FAIL(Internal, op, ": the transposed runs read 16-byte vectors; the operand starts off a 16-byte boundary");
  const Fp8Format f = fp8_format_of(format);
  const RunGeometry geo{offsets, padded_offsets, G, x.dim(0), Rp};
  auto* q = static_cast<unsigned char*>(out.q.data_ptr());
  float* s = out.scale.data<float>();
  if (rows && (x.dtype() != DType::BF16 || C % ops::kFp8Block != 0))
    TETRA_FAIL(Internal, op, ": the runs write the rows' 1×128 codes only from bf16 rows of whole groups");
  if (x.dtype() == DType::BF16)
    launch_runs_cast(static_cast<const bf16*>(x.data_ptr()), C, geo, f, q, s, scale_shape[1], stream, rows);
  else
    launch_runs_cast(x.data<float>(), C, geo, f, q, s, scale_shape[1], stream);
  TETRA_CUDA_CHECK_LAUNCH();
  return out;
}

}  // namespace

ExpertCodes cast_expert_runs_transposed(const Tensor& x, DType format, const int32_t* offsets,
                                        const int32_t* padded_offsets, int G, int64_t Rp, cudaStream_t stream,
                                        const char* op) {
  return runs_cast(x, format, offsets, padded_offsets, G, Rp, stream, op, nullptr);
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

// A row operand's codes cast ahead (ops::Fp8GroupedCodes, Rows1x128; ops.cpp checked their shapes):
// the 1×128 rows (transposed false) or the 128×1 runs; empty where the codes lack that layout.
ExpertCodes rows_given(const ops::Fp8GroupedCodes* codes, bool transposed) {
  if (!codes) return {};
  return transposed ? ExpertCodes{codes->q_t, codes->scale_t} : ExpertCodes{codes->q, codes->scale};
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

// An operand the GEMM casts itself, which must then be given.
const Tensor& operand(const Tensor& t, const char* op) {
  if (!t.defined()) TETRA_FAIL(Internal, op, ": a blockwise operand is given neither as a tensor nor as its codes");
  return t;
}

// The weight gradient's two row operands as 128×1 runs at one set of padded offsets: each from its
// codes cast ahead where they hold the runs (the offsets theirs), else cast here.
void weight_gradient_runs(GroupedFp8Call& call, const Tensor& a, ops::Fp8Cast a_cast, const Tensor& b,
                          ops::Fp8Cast b_cast, const ops::Fp8GroupedCodes* a_codes,
                          const ops::Fp8GroupedCodes* b_codes, Device dev, cudaStream_t stream) {
  GroupedGemm& p = call.p;
  const int G = static_cast<int>(p.G);
  call.qa = rows_given(a_codes, true);
  call.qb = rows_given(b_codes, true);
  const ops::Fp8GroupedCodes* ahead = call.qa.q.defined() ? a_codes : call.qb.q.defined() ? b_codes : nullptr;
  call.po = ahead ? ahead->padded_offsets : padded_offsets(p.offsets, G, p.R, dev, stream);
  p.padded_offsets = call.po.data<int32_t>();
  p.Rp = grouped_gemm_fp8_padded_rows(p.R, p.G);
  if (!call.qa.q.defined())
    call.qa = cast_expert_runs_transposed(operand(a, p.op), a_cast.format, p.offsets, p.padded_offsets, G, p.Rp,
                                          stream, p.op);
  if (!call.qb.q.defined())
    call.qb = cast_expert_runs_transposed(operand(b, p.op), b_cast.format, p.offsets, p.padded_offsets, G, p.Rp,
                                          stream, p.op);
}

}  // namespace

void cast_grouped_fp8_blockwise(GroupedFp8Call& call, const Tensor& a, ops::Fp8Cast a_cast, const Tensor& b,
                                ops::Fp8Cast b_cast, const ops::Fp8GroupedCodes* a_codes,
                                const ops::Fp8GroupedCodes* b_codes, Device dev, cudaStream_t stream) {
  GroupedGemm& p = call.p;
  const bool weight_kind = p.kind == GroupedGemmKind::BackwardWeight;
  const ops::Fp8Scaling b_wants = weight_kind ? ops::Fp8Scaling::Rows1x128 : ops::Fp8Scaling::Blocks128;
  if (a_cast.scaling != ops::Fp8Scaling::Rows1x128 || b_cast.scaling != b_wants)
    TETRA_FAIL(Internal, p.op, ": blockwise grouped GEMMs take 1×128 rows and ",
               weight_kind ? "1×128 rows" : "128×128 weight blocks");
  const char* why = nullptr;
  p.blockwise = true;
  p.fp8_transposed = true;
  static const float kNoScale = 1.0f;  // the check asks only whether scales exist; set below
  p.a_scale = p.b_scale = &kNoScale;
  if (!grouped_gemm_fp8_wgmma_applies(p, &why))
    TETRA_FAIL(Config, p.op, ": blockwise FP8 expert GEMMs run only on Hopper's tensor-core kernel, which does not "
               "apply here: ", why);
  if (weight_kind) {
    weight_gradient_runs(call, a, a_cast, b, b_cast, a_codes, b_codes, dev, stream);
  } else {
    const bool transposed = p.kind == GroupedGemmKind::BackwardInput;
    call.qa = rows_given(a_codes, false);
    if (!call.qa.q.defined()) call.qa = rows_1x128(operand(a, p.op), a_cast.format);
    call.qb = b_codes ? weight_blocks_given(*b_codes, transposed, p.op)
                      : weight_blocks(operand(b, p.op), b_cast.format, transposed);
  }
  p.a = call.qa.q.data_ptr(), p.b = call.qb.q.data_ptr();
  p.a_scale = call.qa.scale.data<float>(), p.b_scale = call.qb.scale.data<float>();
  p.a_scale_ld = call.qa.scale.dim(1), p.b_scale_ld = call.qb.scale.dim(1);
}

void cast_blockwise_row_codes(ops::Fp8GroupedCodes& out, const Tensor& x, ops::Fp8Cast cast, const Tensor& offsets) {
  const char* op = "moe_grouped_fp8_cast";
  const int64_t R = x.dim(0), C = x.dim(1);
  const int G = static_cast<int>(offsets.numel() - 1);
  const Device dev = x.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  out = ops::Fp8GroupedCodes{};
  out.format = cast.format;
  out.padded_offsets = padded_offsets(offsets.data<int32_t>(), G, R, dev, stream);
  const int32_t* po = out.padded_offsets.data<int32_t>();
  const int64_t Rp = grouped_gemm_fp8_padded_rows(R, G);
  ExpertCodes runs;
  if (x.dtype() == DType::BF16) {  // one read of x: the rows' codes beside the runs
    out.q = Tensor::empty({R, C}, cast.format, dev);
    // Zeros where no expert's row writes a scale (rows outside the experts, the padding), as fp8_quantize's.
    out.scale = Tensor::zeros(fp8_scale_shape(ops::Fp8Scaling::Rows1x128, R, C), DType::F32, dev);
    const RowCodesOut rows{static_cast<unsigned char*>(out.q.data_ptr()), out.scale.data<float>(), out.scale.dim(1)};
    runs = runs_cast(x, cast.format, offsets.data<int32_t>(), po, G, Rp, stream, op, &rows);
  } else {  // fp32: a block's 64 columns are half a group; the two casts
    const ExpertCodes rows = rows_1x128(x, cast.format);
    out.q = rows.q, out.scale = rows.scale;
    runs = cast_expert_runs_transposed(x, cast.format, offsets.data<int32_t>(), po, G, Rp, stream, op);
  }
  out.q_t = runs.q, out.scale_t = runs.scale;
}

}  // namespace tetra::cuda
