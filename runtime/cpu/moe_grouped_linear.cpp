// CPU grouped expert GEMMs (runtime/ops.h): expert g owns rows [offsets[g], offsets[g + 1]) of the
// row tensors and the weight w[g] [O, I] (nn.Linear layout); one OpenBLAS GEMM per non-empty expert.
//   forward          y[rows of g]  = x[rows of g] · w[g]ᵀ
//   backward input   dx[rows of g] = dy[rows of g] · w[g]
//   backward weight  dw[g] (+)= dy[rows of g]ᵀ · x[rows of g]     (0 for an expert without rows)
// Offsets are checked: nondecreasing within [0, R]. fp32.
// The FP8 grouped GEMMs (moe_grouped_fp8_*) cast each expert's rows and weight on their own with the
// CPU's fp8_quantize and multiply them with its fp8_gemm (the recipes' emulation), expert by expert;
// an operand cast ahead (moe_grouped_fp8_cast: those casts, placed in the CUDA kernels' layouts) is
// read back out of its codes instead.
#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/fp8_cast_shape.h"
#include "runtime/fp8_format.h"
#include "runtime/moe_shape.h"

namespace tetra::cpu {

namespace {

int ld(int64_t n) { return static_cast<int>(std::max<int64_t>(n, 1)); }

const int32_t* checked_offsets(const char* op, const Tensor& offsets, int64_t G, int64_t R) {
  const int32_t* o = offsets.data<int32_t>();
  for (int64_t g = 0; g <= G; ++g) {
    if (o[g] < 0 || o[g] > R || (g > 0 && o[g] < o[g - 1]))
      TETRA_FAIL(Internal, op, ": offsets[", g, "] = ", o[g], " breaks the rule 0 ≤ offsets[0] ≤ … ≤ offsets[G = ", G,
                 "] ≤ R = ", R, " (expert g owns rows [offsets[g], offsets[g + 1]))");
  }
  return o;
}

struct Operand {
  const char* name;
  const Tensor& t;
};

// c = a ∘ b of one grouped GEMM, after runtime/moe_shape.h's shape checks: all fp32, offsets valid.
const int32_t* checked_operands(const char* op, Operand c, Operand a, Operand b, const Tensor& offsets,
                                const MoeGemmDims& d) {
  for (const Operand& t : {c, a, b})
    if (t.t.defined()) check_dtype(op, t.name, t.t, DType::F32);  // undefined: codes stand for x (ops.cpp checked)
  return checked_offsets(op, offsets, d.G, d.R);
}

// The row GEMMs of forward and backward input: per expert g with m rows, out[rows of g] [m, n] =
// in[rows of g] [m, k] · w[g]ᵀ (w[g] [n, k]: forward) or · w[g] (w[g] [k, n]: backward input);
// zeros where k = 0.
void row_gemms(const int32_t* o, int64_t G, const float* in, const float* w, float* out, int64_t n, int64_t k,
               bool w_transposed) {
  for (int64_t g = 0; g < G; ++g) {
    const int64_t m = o[g + 1] - o[g];
    if (m == 0 || n == 0) continue;
    float* outg = out + o[g] * n;
    if (k == 0) {
      std::fill(outg, outg + m * n, 0.0f);
      continue;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, w_transposed ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, in + o[g] * k, ld(k), w + g * n * k,
                ld(w_transposed ? k : n), 0.0f, outg, ld(n));
  }
}

}  // namespace

void moe_grouped_linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& offsets) {
  const char* op = "moe_grouped_linear_forward";
  const MoeGemmDims d = check_moe_grouped_forward(op, y, x, w, offsets);
  const int32_t* o = checked_operands(op, {"y", y}, {"x", x}, {"w", w}, offsets, d);
  row_gemms(o, d.G, x.data<float>(), w.data<float>(), y.data<float>(), d.O, d.I, /*w_transposed=*/true);
}

void moe_grouped_linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& offsets) {
  const char* op = "moe_grouped_linear_backward_input";
  const MoeGemmDims d = check_moe_grouped_backward_input(op, dx, dy, w, offsets);
  const int32_t* o = checked_operands(op, {"dx", dx}, {"dy", dy}, {"w", w}, offsets, d);
  row_gemms(o, d.G, dy.data<float>(), w.data<float>(), dx.data<float>(), d.I, d.O, /*w_transposed=*/false);
}

void moe_grouped_linear_backward_weight(Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets,
                                        bool accumulate) {
  const char* op = "moe_grouped_linear_backward_weight";
  const MoeGemmDims d = check_moe_grouped_backward_weight(op, dw, dy, x, offsets);
  const int32_t* o = checked_operands(op, {"dw", dw}, {"dy", dy}, {"x", x}, offsets, d);
  const float* pdy = dy.data<float>();
  const float* px = x.data<float>();
  float* pdw = dw.data<float>();
  for (int64_t g = 0; g < d.G; ++g) {
    const int64_t m = o[g + 1] - o[g];
    float* dwg = pdw + g * d.O * d.I;
    if (d.O == 0 || d.I == 0) continue;
    if (m == 0) {
      if (!accumulate) std::fill(dwg, dwg + d.O * d.I, 0.0f);
      continue;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(d.O), static_cast<int>(d.I),
                static_cast<int>(m), 1.0f, pdy + o[g] * d.O, ld(d.O), px + o[g] * d.I, ld(d.I),
                accumulate ? 1.0f : 0.0f, dwg, ld(d.I));
  }
}

namespace {

// One FP8 operand of an expert: codes and scales as fp8_quantize writes them.
struct ExpertCast {
  Tensor q, scale;
  ops::Fp8Scaling scaling = ops::Fp8Scaling::Tensorwise;
};

ExpertCast empty_cast(ops::Fp8Cast c, int64_t rows, int64_t cols) {
  return {Tensor::empty({rows, cols}, c.format, Device::cpu()),
          Tensor::empty(fp8_scale_shape(c.scaling, rows, cols), DType::F32, Device::cpu()), c.scaling};
}

// x [rows, cols] cast as `c`; with `transposed`, xᵀ [cols, rows] too.
// amax (may be null): x's, as its producer measured it (Tensorwise only).
ExpertCast cast_expert(const Tensor& x, ops::Fp8Cast c, ExpertCast* transposed = nullptr, const Tensor* amax = nullptr) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  ExpertCast out = empty_cast(c, rows, cols);
  if (transposed) *transposed = empty_cast(c, cols, rows);
  cpu::fp8_quantize(out.q, out.scale, x, c.scaling, transposed ? &transposed->q : nullptr,
                    transposed ? &transposed->scale : nullptr, amax);
  return out;
}

// The largest of row_amax [first, first + m) (the bits): an expert's amax from its rows'.
Tensor rows_amax(const Tensor& row_amax, int64_t first, int64_t m) {
  const auto* a = static_cast<const uint32_t*>(row_amax.data_ptr()) + first;
  Tensor out = Tensor::empty({1}, DType::U32, Device::cpu());
  *static_cast<uint32_t*>(out.data_ptr()) = *std::max_element(a, a + m);
  return out;
}

void expert_gemm(Tensor& y, const ExpertCast& a, const ExpertCast& b, bool accumulate) {
  cpu::fp8_gemm(y, a.q, a.scale, a.scaling, b.q, b.scale, b.scaling, accumulate, false, {});
}

Tensor expert_weight(const Tensor& w, int64_t g, int64_t O, int64_t I) { return w.slice_flat(g * O * I, {O, I}); }

// Expert g's operand out of codes cast ahead (ops::Fp8GroupedCodes), Tensorwise: codes with the
// expert's scale as a [1] tensor, as cast_expert would give them. False where codes lack the layout.
ExpertCast with_scale(Tensor q, const ops::Fp8GroupedCodes& c, int64_t g) {
  return {std::move(q), Tensor::from_vector(std::vector<float>{c.scale.data<float>()[g]}, {1}),
          ops::Fp8Scaling::Tensorwise};
}

// Columns [c0, c0 + n) of the 2-D t [rows, cols] as a tensor [rows, ld] of its own (zeros past n).
Tensor columns(const Tensor& t, int64_t c0, int64_t n, int64_t ld) {
  const int64_t rows = t.dim(0), cols = t.dim(1), esize = static_cast<int64_t>(dtype_size(t.dtype()));
  Tensor out = Tensor::zeros({rows, ld}, t.dtype(), Device::cpu());
  const auto* src = static_cast<const uint8_t*>(t.data_ptr());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + (r * cols + c0) * esize, n * esize, dst + r * ld * esize);
  return out;
}

// The inverse: src [rows, ·]'s first n columns into columns [c0, c0 + n) of dst [rows, ·] (one dtype).
void put_columns(Tensor& dst, int64_t c0, const Tensor& src, int64_t n) {
  const int64_t rows = src.dim(0), esize = static_cast<int64_t>(dtype_size(src.dtype()));
  const auto* s = static_cast<const uint8_t*>(src.data_ptr());
  auto* d = static_cast<uint8_t*>(dst.data_ptr());
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(s + r * src.dim(1) * esize, n * esize, d + (r * dst.dim(1) + c0) * esize);
}

// Rows [r0, r0 + m) of a row tensor's codes, in their layout [m, cols], with their scales (Tensorwise:
// the expert's; Rows1x128: the rows' 1×128 scales, columns r0 … of the whole tensor's).
bool coded_rows(const ops::Fp8GroupedCodes* c, ops::Fp8Scaling scaling, int64_t g, int64_t r0, int64_t m,
                ExpertCast* out) {
  if (!c || !c->q.defined()) return false;
  if (scaling != ops::Fp8Scaling::Rows1x128) {
    *out = with_scale(c->q.narrow(r0, m), *c, g);
    return true;
  }
  const int64_t cols = c->q.dim(1);
  *out = {c->q.narrow(r0, m), columns(c->scale, r0, m, fp8_scale_shape(scaling, m, cols)[1]), scaling};
  return true;
}

// The same rows transposed, [cols, m]: from q_t's columns [po[g], po[g] + m), else q transposed
// (a Tensorwise cast's transposed codes are its codes transposed; Rows1x128's runs come from q_t
// only, with their scales, rows po[g] / 128 … of scale_t).
bool coded_rows_t(const ops::Fp8GroupedCodes* c, ops::Fp8Scaling scaling, int64_t g, int64_t r0, int64_t m,
                  ExpertCast* out) {
  const bool runs = scaling == ops::Fp8Scaling::Rows1x128;
  if (!c || (!c->q_t.defined() && (runs || !c->q.defined()))) return false;
  Tensor t;
  if (c->q_t.defined()) {
    t = columns(c->q_t, c->padded_offsets.data<int32_t>()[g], m, m);
  } else {
    const int64_t cols = c->q.dim(1);
    t = Tensor::empty({cols, m}, c->format, Device::cpu());
    auto* dst = static_cast<uint8_t*>(t.data_ptr());
    const auto* src = static_cast<const uint8_t*>(c->q.data_ptr()) + r0 * cols;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t k = 0; k < cols; ++k) dst[k * m + r] = src[r * cols + k];
  }
  if (!runs) {
    *out = with_scale(std::move(t), *c, g);
    return true;
  }
  const int64_t b0 = c->padded_offsets.data<int32_t>()[g] / ops::kFp8Block;
  *out = {std::move(t), c->scale_t.narrow(b0, (m + ops::kFp8Block - 1) / ops::kFp8Block), scaling};
  return true;
}

// w[g]'s codes [O, I] with its 128×128 block scales out of a blockwise stack's codes (ops.h
// Fp8GroupedCodes, Blocks128): rows g·O … of the stack (transposed false), or w[g]ᵀ's [I, O], columns
// g·O … of the stack's transposed codes, as fp8_quantize of w[g] alone writes them.
ExpertCast block_coded_weight(const ops::Fp8GroupedCodes& c, int64_t g, int64_t O, int64_t I, bool transposed) {
  const ops::Fp8Scaling blocks = ops::Fp8Scaling::Blocks128;
  const int64_t b0 = g * O / ops::kFp8Block, nb = O / ops::kFp8Block;
  if (!transposed) return {c.q.slice_flat(g * O * I, {O, I}), c.scale.narrow(b0, nb), blocks};
  return {columns(c.q_t, g * O, O, O), columns(c.scale_t, b0, nb, fp8_scale_shape(blocks, I, O)[1]), blocks};
}

// w[g]'s codes [O, I] (transposed false) or w[g]ᵀ's [I, O].
bool coded_weight(const ops::Fp8GroupedCodes* c, ops::Fp8Scaling scaling, int64_t g, int64_t O, int64_t I,
                  bool transposed, ExpertCast* out) {
  if (!c) return false;
  const Tensor& q = transposed ? c->q_t : c->q;
  if (!q.defined()) return false;
  if (scaling == ops::Fp8Scaling::Blocks128) {
    *out = block_coded_weight(*c, g, O, I, transposed);
    return true;
  }
  *out = with_scale(q.slice_flat(g * O * I, transposed ? Shape{I, O} : Shape{O, I}), *c, g);
  return true;
}

}  // namespace

static_assert(fp8_padded_expert_rows(1) == ops::kFp8Block, "an expert's padded rows are whole FP8 blocks");

namespace {

// moe_grouped_fp8_cast of a blockwise row tensor x [R, C] (Rows1x128; ops.h Fp8GroupedCodes): each
// expert's rows cast on their own in 1×128 groups with their 128×1 runs, placed.
void cast_blockwise_rows(ops::Fp8GroupedCodes& out, const Tensor& x, ops::Fp8Cast cast, const Tensor& offsets) {
  const ops::Fp8Scaling runs = ops::Fp8Scaling::Rows1x128;
  const int64_t G = offsets.numel() - 1, R = x.dim(0), C = x.dim(1), Rp = ops::moe_grouped_fp8_padded_rows(R, G);
  const int32_t* o = offsets.data<int32_t>();
  if (o[0] < 0 || o[G] > R)
    TETRA_FAIL(Internal, "moe_grouped_fp8_cast: the offsets span rows [", o[0], ", ", o[G], ") of ", R);
  out = ops::Fp8GroupedCodes{};
  out.format = cast.format;
  out.q = Tensor::zeros({R, C}, cast.format, Device::cpu());
  out.scale = Tensor::zeros(fp8_scale_shape(runs, R, C), DType::F32, Device::cpu());
  out.q_t = Tensor::zeros({C, Rp}, cast.format, Device::cpu());
  out.scale_t = Tensor::zeros(fp8_scale_shape(runs, C, Rp), DType::F32, Device::cpu());
  out.padded_offsets = Tensor::empty({G + 1}, DType::I32, Device::cpu());
  int32_t* po = out.padded_offsets.data<int32_t>();
  po[0] = 0;
  const int64_t ld_t = out.scale_t.dim(1);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t m = o[g + 1] - o[g];
    po[g + 1] = static_cast<int32_t>(po[g] + fp8_padded_expert_rows(m));
    if (m == 0 || C == 0) continue;
    ExpertCast t;
    const ExpertCast e = cast_expert(x.narrow(o[g], m), cast, &t);
    std::copy_n(static_cast<const uint8_t*>(e.q.data_ptr()), m * C, static_cast<uint8_t*>(out.q.data_ptr()) + o[g] * C);
    put_columns(out.scale, o[g], e.scale, m);  // [C/128, padded m] into columns o[g] … of [C/128, padded R]
    put_columns(out.q_t, po[g], t.q, m);       // [C, m] into columns po[g] … of [C, Rp]
    // [⌈m/128⌉, padded C] into rows po[g] / 128 … of [Rp/128, padded C]
    std::copy_n(t.scale.data<float>(), t.scale.numel(), out.scale_t.data<float>() + po[g] / ops::kFp8Block * ld_t);
  }
}

}  // namespace

void moe_grouped_fp8_cast(ops::Fp8GroupedCodes& out, const Tensor& x, ops::Fp8Cast cast, const Tensor* offsets,
                          const Tensor* row_amax, const Tensor* expert_amax) {
  if (cast.scaling == ops::Fp8Scaling::Rows1x128) return cast_blockwise_rows(out, x, cast, *offsets);
  const bool rows = offsets != nullptr;
  const int64_t G = rows ? offsets->numel() - 1 : x.dim(0);
  const int64_t R = rows ? x.dim(0) : 0, cols = rows ? x.dim(1) : x.dim(2), O = rows ? 0 : x.dim(1);
  const int32_t* o = rows ? offsets->data<int32_t>() : nullptr;
  if (rows && (o[0] < 0 || o[G] > R))
    TETRA_FAIL(Internal, "moe_grouped_fp8_cast: the offsets span rows [", o[0], ", ", o[G], ") of ", R);
  out = ops::Fp8GroupedCodes{};
  out.format = cast.format;
  out.q = Tensor::zeros(x.shape(), cast.format, Device::cpu());
  out.scale = Tensor::empty({G}, DType::F32, Device::cpu());
  const int64_t Rp = ops::moe_grouped_fp8_padded_rows(R, G);
  out.q_t = Tensor::zeros(rows ? Shape{cols, Rp} : Shape{G, cols, O}, cast.format, Device::cpu());
  if (rows) out.padded_offsets = Tensor::empty({G + 1}, DType::I32, Device::cpu());
  int32_t* po = rows ? out.padded_offsets.data<int32_t>() : nullptr;
  if (po) po[0] = 0;
  auto* q = static_cast<uint8_t*>(out.q.data_ptr());
  auto* qt = static_cast<uint8_t*>(out.q_t.data_ptr());
  const float largest = fp8_largest(fp8_format_of(cast.format));
  for (int64_t g = 0; g < G; ++g) {
    const int64_t m = rows ? o[g + 1] - o[g] : O, first = rows ? o[g] : g * O;
    if (po) po[g + 1] = static_cast<int32_t>(po[g] + fp8_padded_expert_rows(m));
    if (m == 0 || cols == 0) {  // nothing to cast: the scale of an amax of 0, as the CUDA kernels write it
      out.scale.data<float>()[g] = 1.0f / fp8_quant_factor(0.0f, largest);
      continue;
    }
    ExpertCast t;
    const Tensor given = row_amax      ? rows_amax(*row_amax, first, m)
                         : expert_amax ? expert_amax->slice_flat(g, {1})
                                       : Tensor();
    const ExpertCast e = cast_expert(rows ? x.narrow(first, m) : expert_weight(x, g, O, cols), cast, &t,
                                     given.defined() ? &given : nullptr);
    out.scale.data<float>()[g] = e.scale.data<float>()[0];
    std::copy_n(static_cast<const uint8_t*>(e.q.data_ptr()), m * cols, q + first * cols);
    const auto* tq = static_cast<const uint8_t*>(t.q.data_ptr());  // [cols, m]
    for (int64_t k = 0; k < cols; ++k)
      std::copy_n(tq + k * m, m, rows ? qt + k * Rp + po[g] : qt + g * cols * O + k * O);
  }
}

void moe_permute_fp8_cast(Tensor& rows, ops::Fp8GroupedCodes& out, const Tensor& x, const Tensor& slot_of,
                          int64_t top_k, const Tensor& offsets, ops::Fp8Cast cast, const Tensor* weights,
                          const Tensor* token_amax) {
  const int64_t R = slot_of.numel(), C = x.dim(1);
  Tensor gathered = rows.defined() ? rows : Tensor::empty({R, C}, x.dtype(), Device::cpu());
  Tensor row_amax = Tensor::empty({R}, DType::U32, Device::cpu());
  cpu::moe_permute(gathered, x, slot_of, top_k, &row_amax);
  const int32_t* slot = slot_of.data<int32_t>();
  if (weights) {  // moe_unpermute_backward's d_rows: w · dy in fp32 (the CPU's dtype)
    const float* w = weights->data<float>();
    float* g = gathered.data<float>();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) g[r * C + c] = w[slot[r]] * g[r * C + c];
  }
  // Each row's amax: its token's as given (times |w|: the largest |w·x| of the row, as the product
  // by a fixed |w| keeps the order), else as measured — the permutation's, or the weighted rows' by
  // the cast itself.
  const bool rows_measured = !weights || token_amax;
  if (token_amax) {
    const auto* t = static_cast<const uint32_t*>(token_amax->data_ptr());
    auto* a = static_cast<uint32_t*>(row_amax.data_ptr());
    for (int64_t r = 0; r < R; ++r) {
      if (slot[r] < 0) continue;  // a row of no slot: the permutation's measure (of the zeros it wrote)
      const float w = weights ? std::fabs(weights->data<float>()[slot[r]]) : 1.0f;
      a[r] = std::bit_cast<uint32_t>(std::bit_cast<float>(t[slot[r] / top_k]) * w);
    }
  }
  cpu::moe_grouped_fp8_cast(out, gathered, cast, &offsets, rows_measured ? &row_amax : nullptr, nullptr);
}

void moe_grouped_fp8_forward(Tensor& y, const Tensor& x, ops::Fp8Cast x_cast, const Tensor& w, ops::Fp8Cast w_cast,
                             const Tensor& offsets, const ops::Fp8GroupedCodes* x_codes,
                             const ops::Fp8GroupedCodes* w_codes) {
  const char* op = "moe_grouped_fp8_forward";
  const MoeGemmDims d = check_moe_grouped_forward(op, y, x, w, offsets, /*coded=*/true);
  const int32_t* o = checked_operands(op, {"y", y}, {"x", x}, {"w", w}, offsets, d);
  for (int64_t g = 0; g < d.G; ++g) {
    const int64_t m = o[g + 1] - o[g];
    if (m == 0 || d.O == 0) continue;
    Tensor yg = y.narrow(o[g], m);
    ExpertCast a, b;
    if (!coded_rows(x_codes, x_cast.scaling, g, o[g], m, &a)) a = cast_expert(x.narrow(o[g], m), x_cast);
    if (!coded_weight(w_codes, w_cast.scaling, g, d.O, d.I, false, &b))
      b = cast_expert(expert_weight(w, g, d.O, d.I), w_cast);
    expert_gemm(yg, a, b, /*accumulate=*/false);
  }
}

void moe_grouped_fp8_backward_input(Tensor& dx, const Tensor& dy, ops::Fp8Cast dy_cast, const Tensor& w,
                                    ops::Fp8Cast w_cast, const Tensor& offsets, const ops::Fp8GroupedCodes* dy_codes,
                                    const ops::Fp8GroupedCodes* w_codes) {
  const char* op = "moe_grouped_fp8_backward_input";
  const MoeGemmDims d = check_moe_grouped_backward_input(op, dx, dy, w, offsets, /*coded=*/true);
  const int32_t* o = checked_operands(op, {"dx", dx}, {"dy", dy}, {"w", w}, offsets, d);
  for (int64_t g = 0; g < d.G; ++g) {
    const int64_t m = o[g + 1] - o[g];
    if (m == 0 || d.I == 0) continue;
    ExpertCast a, w_t;
    if (!coded_weight(w_codes, w_cast.scaling, g, d.O, d.I, true, &w_t))
      cast_expert(expert_weight(w, g, d.O, d.I), w_cast, &w_t);
    if (!coded_rows(dy_codes, dy_cast.scaling, g, o[g], m, &a)) a = cast_expert(dy.narrow(o[g], m), dy_cast);
    Tensor dxg = dx.narrow(o[g], m);
    expert_gemm(dxg, a, w_t, /*accumulate=*/false);
  }
}

void moe_grouped_fp8_backward_weight(Tensor& dw, const Tensor& dy, ops::Fp8Cast dy_cast, const Tensor& x,
                                     ops::Fp8Cast x_cast, const Tensor& offsets, bool accumulate,
                                     const ops::Fp8GroupedCodes* dy_codes, const ops::Fp8GroupedCodes* x_codes) {
  const char* op = "moe_grouped_fp8_backward_weight";
  const MoeGemmDims d = check_moe_grouped_backward_weight(op, dw, dy, x, offsets, /*coded=*/true);
  const int32_t* o = checked_operands(op, {"dw", dw}, {"dy", dy}, {"x", x}, offsets, d);
  for (int64_t g = 0; g < d.G; ++g) {
    const int64_t m = o[g + 1] - o[g];
    Tensor dwg = expert_weight(dw, g, d.O, d.I);
    if (d.O == 0 || d.I == 0) continue;
    if (m == 0) {
      if (!accumulate) std::fill_n(dwg.data<float>(), dwg.numel(), 0.0f);
      continue;
    }
    // The K-major operands of dw[g] = dyᵀ·x: the transposed copies, in runs of the expert's rows.
    ExpertCast dy_t, x_t;
    if (!coded_rows_t(dy_codes, dy_cast.scaling, g, o[g], m, &dy_t)) cast_expert(dy.narrow(o[g], m), dy_cast, &dy_t);
    if (!coded_rows_t(x_codes, x_cast.scaling, g, o[g], m, &x_t)) cast_expert(x.narrow(o[g], m), x_cast, &x_t);
    expert_gemm(dwg, dy_t, x_t, accumulate);
  }
}

}  // namespace tetra::cpu
