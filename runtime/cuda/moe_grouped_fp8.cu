// CUDA grouped FP8 expert GEMMs (runtime/ops.h moe_grouped_fp8_*). Tensorwise: one scale per
// expert's rows and one per expert's weight, the CPU twin's (runtime/cpu/moe_grouped_linear.cpp)
// codes and scales bit for bit. Everything runs from the offsets in device memory (no host
// synchronisation; a CUDA graph captures it):
//   1. the casts (runtime/cuda/moe_grouped_fp8_cast.h): per-expert amax, scales and codes, in the
//      layouts of the kernel that multiplies them (transposed for the tensor cores);
//   2. the grouped GEMM on the codes (grouped_gemm_fp8, runtime/cuda/moe_grouped_gemm.h), scaled per
//      expert in its epilogue.
// Rows1x128 and Blocks128 (DeepSeek-V3's blockwise scales) are cast by
// runtime/cuda/moe_grouped_fp8_blockwise.cu and run on the tensor-core kernel's blockwise mainloop
// only. Codes and scales are temporary tensors of the call (stream-ordered).
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/device_context.h"
#include "runtime/cuda/moe_grouped_fp8.h"
#include "runtime/moe_shape.h"

namespace tetra::cuda {

namespace {

void check_operands(const char* op, const Tensor& c, const Tensor& a, ops::Fp8Cast a_cast, const Tensor& b,
                    ops::Fp8Cast b_cast, const Tensor& offsets) {
  check_cuda_float(op, "the output", c);
  // A row operand x may be undefined, its codes standing for it (ops.cpp checked that they do).
  if (a.defined()) check_cuda_float(op, "a row operand", a);
  if (b.defined()) check_cuda_float(op, "the other operand", b);
  check_cuda_tensor(op, "offsets", offsets);
  for (const ops::Fp8Cast& cast : {a_cast, b_cast}) {
    if (cast.format != DType::F8E4M3 && cast.format != DType::F8E5M2)
      TETRA_FAIL(Internal, op, ": a cast's format is ", dtype_name(cast.format), ", not F8E4M3 or F8E5M2");
  }
  if ((a_cast.scaling == ops::Fp8Scaling::Tensorwise) != (b_cast.scaling == ops::Fp8Scaling::Tensorwise))
    TETRA_FAIL(Internal, op, ": one operand cast tensorwise and the other blockwise");
}

// The experts' rows of a row tensor [R, cols].
Segments row_segments(int64_t cols, const MoeGemmDims& d, const Tensor& offsets) {
  Segments s;
  s.offsets = offsets.data<int32_t>();
  s.G = static_cast<int>(d.G);
  s.R = d.R;
  s.cols = cols;
  return s;
}

Segments weights_of(const MoeGemmDims& d) {
  Segments s;
  s.G = static_cast<int>(d.G);
  s.O = d.O;
  s.cols = d.I;
  return s;
}

// The codes of one operand in `layout` out of codes cast ahead, where they hold that layout.
bool from_codes(const ops::Fp8GroupedCodes* codes, const CodeLayout& layout, ExpertCodes* out) {
  if (!codes) return false;
  const Tensor& q = layout.transposed ? codes->q_t : codes->q;
  if (!q.defined()) return false;
  *out = ExpertCodes{q, codes->scale};
  return true;
}

// One operand t in `layout`: from its codes cast ahead, cast here from t, or — t undefined (ops.cpp
// checked that its codes hold the layout the GEMM reads: the weight gradient's transposed one) and
// the SIMT kernel reading rows — its transposed codes turned back into rows.
ExpertCodes operand_codes(const char* op, const Tensor& t, ops::Fp8Cast cast, const ops::Fp8GroupedCodes* codes,
                          const Segments& segs, const CodeLayout& layout, Device dev, cudaStream_t stream) {
  ExpertCodes out;
  if (from_codes(codes, layout, &out)) return out;
  if (t.defined()) return cast_segments(t, cast, segs, layout, dev, stream, op);
  if (!codes || !codes->q_t.defined() || layout.transposed)
    TETRA_FAIL(Internal, op, ": an operand is given neither as a tensor nor as codes in a layout this kernel reads");
  const CodeLayout from{true, codes->padded_offsets.data<int32_t>(), codes->q_t.dim(1)};
  return ExpertCodes{rows_from_transposed(codes->q_t, segs, from, dev, stream), codes->scale};
}

}  // namespace

GroupedFp8Call cast_grouped_fp8(const char* op, GroupedGemmKind kind, Tensor& c, const Tensor& a, ops::Fp8Cast a_cast,
                                const Tensor& b, ops::Fp8Cast b_cast, const Tensor& offsets, bool accumulate,
                                const ops::Fp8GroupedCodes* a_codes, const ops::Fp8GroupedCodes* b_codes) {
  const Device dev = c.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  const bool weight_kind = kind == GroupedGemmKind::BackwardWeight;
  // R: the row operand a's rows (x or dy may be undefined, its codes standing for it: then the forward's
  // y, the input gradient's dx, or the weight gradient's other row operand b).
  const int64_t G = offsets.numel() - 1, R = a.defined() ? a.dim(0) : weight_kind ? b.dim(0) : c.dim(0);
  // [G, O, I] of the weight (forward, input gradient) or the weight gradient.
  const Tensor& w = weight_kind ? c : b;
  const MoeGemmDims d{G, R, w.dim(1), w.dim(2)};
  GroupedFp8Call call;
  GroupedGemm& p = call.p;
  p.kind = kind;
  p.G = d.G, p.R = d.R, p.O = d.O, p.I = d.I;
  p.offsets = offsets.data<int32_t>();
  p.c = c.data_ptr();
  p.ab_type = a_cast.format, p.b_fp8 = b_cast.format, p.c_type = c.dtype();
  p.accumulate = accumulate;
  p.op = op;
  if (a_cast.scaling != ops::Fp8Scaling::Tensorwise) {
    cast_grouped_fp8_blockwise(call, a, a_cast, b, b_cast, a_codes, b_codes, dev, stream);
    return call;
  }
  static const float kNoScale = 1.0f;  // grouped_gemm_fp8_tensor_cores asks only whether scales exist
  p.a_scale = p.b_scale = &kNoScale;
  p.fp8_transposed = grouped_gemm_fp8_tensor_cores(p);
  // Tensor cores: B of BackwardInput is w[g]ᵀ; both operands of BackwardWeight are transposed and padded.
  CodeLayout a_layout, b_layout;
  if (p.fp8_transposed && weight_kind) {
    // The padded offsets of codes cast ahead where one operand brings them (the same values).
    const ops::Fp8GroupedCodes* ahead = a_codes && a_codes->q_t.defined()   ? a_codes
                                        : b_codes && b_codes->q_t.defined() ? b_codes
                                                                            : nullptr;
    call.po = ahead ? ahead->padded_offsets : padded_offsets(p.offsets, static_cast<int>(d.G), d.R, dev, stream);
    p.padded_offsets = call.po.data<int32_t>();
    p.Rp = grouped_gemm_fp8_padded_rows(d.R, d.G);
    a_layout = b_layout = CodeLayout{true, p.padded_offsets, p.Rp};
  } else if (p.fp8_transposed && kind == GroupedGemmKind::BackwardInput) {
    b_layout.transposed = true;
  }
  // Row operands: the forward's x [R, I], the input gradient's dy [R, O]; the weight gradient's dy [R, O], x [R, I].
  const int64_t a_cols = kind == GroupedGemmKind::Forward ? d.I : d.O;
  const Segments a_segs = row_segments(a_cols, d, offsets), b_segs = weight_kind ? row_segments(d.I, d, offsets) : weights_of(d);
  call.qa = operand_codes(op, a, a_cast, a_codes, a_segs, a_layout, dev, stream);
  call.qb = operand_codes(op, b, b_cast, b_codes, b_segs, b_layout, dev, stream);
  p.a = call.qa.q.data_ptr(), p.b = call.qb.q.data_ptr();
  p.a_scale = call.qa.scale.data<float>(), p.b_scale = call.qb.scale.data<float>();
  return call;
}

namespace {

// c (+)= a ∘ b in `kind`'s layout, both cast per expert in the layouts of the kernel that runs it.
void run(const char* op, GroupedGemmKind kind, Tensor& c, const Tensor& a, ops::Fp8Cast a_cast, const Tensor& b,
         ops::Fp8Cast b_cast, const Tensor& offsets, bool accumulate, const ops::Fp8GroupedCodes* a_codes,
         const ops::Fp8GroupedCodes* b_codes) {
  const GroupedFp8Call call = cast_grouped_fp8(op, kind, c, a, a_cast, b, b_cast, offsets, accumulate, a_codes, b_codes);
  DeviceScope scope(c.device());
  grouped_gemm_fp8(call.p, c.device(), stream_of(c.device()));
}

}  // namespace

void moe_grouped_fp8_forward(Tensor& y, const Tensor& x, ops::Fp8Cast x_cast, const Tensor& w, ops::Fp8Cast w_cast,
                             const Tensor& offsets, const ops::Fp8GroupedCodes* x_codes,
                             const ops::Fp8GroupedCodes* w_codes) {
  const char* op = "moe_grouped_fp8_forward";
  const MoeGemmDims d = check_moe_grouped_forward(op, y, x, w, offsets, /*coded=*/true);
  check_operands(op, y, x, x_cast, w, w_cast, offsets);
  if (d.G == 0 || d.R == 0 || d.O == 0) return;
  run(op, GroupedGemmKind::Forward, y, x, x_cast, w, w_cast, offsets, false, x_codes, w_codes);
}

void moe_grouped_fp8_backward_input(Tensor& dx, const Tensor& dy, ops::Fp8Cast dy_cast, const Tensor& w,
                                    ops::Fp8Cast w_cast, const Tensor& offsets, const ops::Fp8GroupedCodes* dy_codes,
                                    const ops::Fp8GroupedCodes* w_codes) {
  const char* op = "moe_grouped_fp8_backward_input";
  const MoeGemmDims d = check_moe_grouped_backward_input(op, dx, dy, w, offsets, /*coded=*/true);
  check_operands(op, dx, dy, dy_cast, w, w_cast, offsets);
  if (d.G == 0 || d.R == 0 || d.I == 0) return;
  run(op, GroupedGemmKind::BackwardInput, dx, dy, dy_cast, w, w_cast, offsets, false, dy_codes, w_codes);
}

void moe_grouped_fp8_backward_weight(Tensor& dw, const Tensor& dy, ops::Fp8Cast dy_cast, const Tensor& x,
                                     ops::Fp8Cast x_cast, const Tensor& offsets, bool accumulate,
                                     const ops::Fp8GroupedCodes* dy_codes, const ops::Fp8GroupedCodes* x_codes) {
  const char* op = "moe_grouped_fp8_backward_weight";
  const MoeGemmDims d = check_moe_grouped_backward_weight(op, dw, dy, x, offsets, /*coded=*/true);
  check_operands(op, dw, dy, dy_cast, x, x_cast, offsets);
  if (d.G == 0 || d.O == 0 || d.I == 0) return;
  run(op, GroupedGemmKind::BackwardWeight, dw, dy, dy_cast, x, x_cast, offsets, accumulate, dy_codes, x_codes);
}

void moe_grouped_fp8_cast(ops::Fp8GroupedCodes& out, const Tensor& x, ops::Fp8Cast cast, const Tensor* offsets,
                          const Tensor* row_amax, const Tensor* expert_amax) {
  const char* op = "moe_grouped_fp8_cast";
  check_cuda_float(op, "x", x);
  if (offsets) check_cuda_tensor(op, "offsets", *offsets);
  if (cast.scaling == ops::Fp8Scaling::Rows1x128 && offsets) return cast_blockwise_row_codes(out, x, cast, *offsets);
  if (row_amax) check_cuda_tensor(op, "row_amax", *row_amax);
  if (expert_amax) check_cuda_tensor(op, "expert_amax", *expert_amax);
  const Tensor* given = row_amax ? row_amax : expert_amax;  // the rows' (offsets given) or the experts'
  const Device dev = x.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  const MoeGemmDims d = offsets ? MoeGemmDims{offsets->numel() - 1, x.dim(0), 0, 0}
                                : MoeGemmDims{x.dim(0), 0, x.dim(1), x.dim(2)};
  const Segments s = offsets ? row_segments(x.dim(1), d, *offsets) : weights_of(d);
  CodeLayout t{true, nullptr, 0};
  Tensor po;
  if (offsets) {
    po = padded_offsets(s.offsets, s.G, d.R, dev, stream);
    t.padded_offsets = po.data<int32_t>(), t.Rp = grouped_gemm_fp8_padded_rows(d.R, d.G);
  }
  BothCodes codes = cast_segments_both(x, cast, s, t, dev, stream, op,
                                       given ? static_cast<const unsigned*>(given->data_ptr()) : nullptr);
  out = ops::Fp8GroupedCodes{std::move(codes.q), std::move(codes.q_t), std::move(codes.scale), std::move(po), cast.format,
                             Tensor()};
}

void moe_permute_fp8_cast(Tensor& rows, ops::Fp8GroupedCodes& out, const Tensor& x, const Tensor& slot_of,
                          int64_t top_k, const Tensor& offsets, ops::Fp8Cast cast, const Tensor* weights,
                          const Tensor* token_amax) {
  const char* op = "moe_permute_fp8_cast";
  check_cuda_float(op, "x", x);
  if (rows.defined()) check_cuda_float(op, "rows", rows);
  check_cuda_tensor(op, "slot_of", slot_of);
  check_cuda_tensor(op, "offsets", offsets);
  if (weights) check_cuda_tensor(op, "weights", *weights);
  if (token_amax) check_cuda_tensor(op, "token_amax", *token_amax);
  const int64_t R = slot_of.numel();
  // The two ops (the rows a temporary where not asked for).
  if (!gathered_cast_applies(rows, x) || gathered_cast_kind() == GatheredCast::Separate) {
    Tensor gathered = rows.defined() ? rows : Tensor::empty({R, x.dim(1)}, x.dtype(), x.device());
    Tensor row_amax = Tensor::empty({R}, DType::U32, x.device());
    cuda::moe_permute(gathered, x, slot_of, top_k, weights ? nullptr : &row_amax);
    if (weights) {
      DeviceScope scope(x.device());
      scale_gathered_rows(gathered, slot_of, *weights, stream_of(x.device()));
    }
    cuda::moe_grouped_fp8_cast(out, gathered, cast, &offsets, weights ? nullptr : &row_amax, nullptr);
    return;
  }
  const Device dev = x.device();
  DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  const MoeGemmDims d{offsets.numel() - 1, R, 0, 0};
  Segments s = row_segments(x.dim(1), d, offsets);
  s.gather = slot_of.data<int32_t>(), s.top_k = top_k;
  s.row_weight = weights ? weights->data<float>() : nullptr;
  Tensor po = padded_offsets(s.offsets, s.G, d.R, dev, stream);
  const CodeLayout t{true, po.data<int32_t>(), grouped_gemm_fp8_padded_rows(d.R, d.G)};
  BothCodes codes = cast_gathered_both(rows, x, cast, s, t, dev, stream, op,
                                       token_amax ? static_cast<const unsigned*>(token_amax->data_ptr()) : nullptr);
  out = ops::Fp8GroupedCodes{std::move(codes.q), std::move(codes.q_t), std::move(codes.scale), std::move(po), cast.format,
                             Tensor()};
}

}  // namespace tetra::cuda
