// Device dispatch of the op library: each op calls the kernel of its tensors' device through that
// backend's op table (runtime/op_table.h): CPU kernels in runtime/cpu/, CUDA kernels in runtime/cuda/.
#include "runtime/ops.h"

#include <functional>

#include "runtime/fp8_cast_shape.h"
#include "runtime/moe_shape.h"
#include "runtime/op_table.h"
#include "runtime/trace.h"

namespace tetra {

const OpTable& op_table_for(const char* op, Device device) {
  if (!device.is_cuda()) return cpu::op_table;
  if (!cuda::op_table) TETRA_FAIL(Device, op, ": tensor on ", device.str(), " but tetra was built without CUDA");
  return *cuda::op_table;
}

}  // namespace tetra

// One traced call through the table of `dev`.
#define TETRA_DISPATCH(dev, fn, ...)                                                             \
  do {                                                                                           \
    const ::tetra::OpTable& tetra_table_ = ::tetra::op_table_for(#fn, dev);                      \
    ::tetra::TraceScope tetra_trace_(#fn, "op");                                                 \
    return tetra_table_.fn(__VA_ARGS__);                                                         \
  } while (0)

namespace tetra::ops {

void fill(Tensor& x, float value) { TETRA_DISPATCH(x.device(), fill, x, value); }
void zero(Tensor& x) { TETRA_DISPATCH(x.device(), zero, x); }
void add(Tensor& y, const Tensor& a, const Tensor& b) {
  check_same_device("add", {&y, &a, &b});
  TETRA_DISPATCH(y.device(), add, y, a, b);
}
void scale(Tensor& x, float s) { TETRA_DISPATCH(x.device(), scale, x, s); }
void add_bias(Tensor& y, const Tensor& b) {
  check_same_device("add_bias", {&y, &b});
  TETRA_CHECK(y.defined() && b.defined() && y.ndim() >= 1 && b.ndim() == 1 && b.dim(0) == y.dim(-1),
              "add_bias: b must be [C] for y [.., C], got y ", y.describe(), " and b ", b.describe());
  TETRA_DISPATCH(y.device(), add_bias, y, b);
}

void copy(Tensor& dst, const Tensor& src) {
  TETRA_CHECK(dst.numel() == src.numel(), "copy: ", src.describe(), " into ", dst.describe());
  // The same elements (ZeRO's shard buffers at one rank are the flat buffers): nothing to move.
  if (dst.data_ptr() == src.data_ptr() && dst.dtype() == src.dtype() && dst.device() == src.device()) return;
  TraceScope trace("copy", "op");
  if (dst.device().is_cpu() && src.device().is_cpu()) return cpu::op_table.copy(dst, src);
  // Any copy that involves a GPU is CUDA's.
  if (!cuda::op_table)
    TETRA_FAIL(Device, "copy between ", src.device().str(), " and ", dst.device().str(), ": built without CUDA");
  return cuda::op_table->copy(dst, src);
}

void copy_columns(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t cols) {
  check_same_device("copy_columns", {&dst, &src});
  TETRA_CHECK(dst.ndim() == 2 && src.ndim() == 2 && dst.dtype() == src.dtype() && dst.dim(0) == src.dim(0),
              "copy_columns: ", src.describe(), " into ", dst.describe(), ": two 2-D tensors of one dtype and the "
              "same rows");
  TETRA_CHECK(cols >= 0 && dst_col >= 0 && src_col >= 0 && dst_col + cols <= dst.dim(1) &&
                  src_col + cols <= src.dim(1),
              "copy_columns: columns [", src_col, ", ", src_col + cols, ") of ", src.describe(), " into [", dst_col,
              ", ", dst_col + cols, ") of ", dst.describe());
  const char* d = static_cast<const char*>(dst.data_ptr());
  const char* s = static_cast<const char*>(src.data_ptr());
  TETRA_CHECK(d + dst.nbytes() <= s || s + src.nbytes() <= d, "copy_columns: dst and src overlap");
  if (cols == 0 || dst.dim(0) == 0) return;
  TETRA_DISPATCH(dst.device(), copy_columns, dst, dst_col, src, src_col, cols);
}

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, Activation act, Tensor* pre_act,
                    const Tensor* residual) {
  check_same_device("linear_forward", {&y, &x, &w, &b, pre_act, residual});
  TETRA_DISPATCH(y.device(), linear_forward, y, x, w, b, act, pre_act, residual);
}
void linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, bool accumulate) {
  check_same_device("linear_backward_input", {&dx, &dy, &w});
  TETRA_DISPATCH(dx.device(), linear_backward_input, dx, dy, w, accumulate);
}
void linear_backward_input_gelu(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& gelu_pre) {
  check_same_device("linear_backward_input_gelu", {&dx, &dy, &w, &gelu_pre});
  TETRA_DISPATCH(dx.device(), linear_backward_input_gelu, dx, dy, w, gelu_pre);
}
void linear_backward_weight(Tensor& dw, Tensor* db, const Tensor& dy, const Tensor& x, bool accumulate,
                            const Tensor* dy_column_sum) {
  check_same_device("linear_backward_weight", {&dw, db, &dy, &x, dy_column_sum});
  TETRA_DISPATCH(dw.device(), linear_backward_weight, dw, db, dy, x, accumulate, dy_column_sum);
}
void gelu_forward(Tensor& y, const Tensor& x, Tensor* amax) {
  check_same_device("gelu_forward", {&y, &x, amax});
  if (amax) fp8_check_amax_out("gelu_forward", *amax);
  TETRA_DISPATCH(y.device(), gelu_forward, y, x, amax);
}
void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x, Tensor* amax) {
  check_same_device("gelu_backward", {&dx, &dy, &x, amax});
  if (amax) fp8_check_amax_out("gelu_backward", *amax);
  TETRA_DISPATCH(dx.device(), gelu_backward, dx, dy, x, amax);
}
void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps, Tensor* amax) {
  check_same_device("layernorm_forward", {&y, &mean, &rstd, &x, &w, &b, amax});
  if (amax) fp8_check_amax_out("layernorm_forward", *amax);
  TETRA_DISPATCH(y.device(), layernorm_forward, y, mean, rstd, x, w, b, eps, amax);
}
void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd, bool accumulate_dx, const Tensor* dresidual,
                        Tensor* dx_column_sum, Tensor* dx_rounded, Tensor* dx_amax) {
  check_same_device("layernorm_backward",
                    {&dx, &dw, &db, &dy, &x, &w, &mean, &rstd, dresidual, dx_column_sum, dx_rounded, dx_amax});
  if (dx_amax) fp8_check_amax_out("layernorm_backward", *dx_amax);
  TETRA_DISPATCH(dx.device(), layernorm_backward, dx, dw, db, dy, x, w, mean, rstd, accumulate_dx, dresidual,
                 dx_column_sum, dx_rounded, dx_amax);
}
void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps, Tensor* amax,
                     Tensor* row_amax) {
  check_same_device("rmsnorm_forward", {&y, &rstd, &x, &w, amax, row_amax});
  if (amax) fp8_check_amax_out("rmsnorm_forward", *amax);
  if (row_amax) fp8_check_row_amax("rmsnorm_forward", *row_amax, rows_of(x));
  TETRA_DISPATCH(y.device(), rmsnorm_forward, y, rstd, x, w, eps, amax, row_amax);
}
void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      bool accumulate_dx, const Tensor* dresidual, Tensor* dx_rounded, Tensor* dx_amax,
                      Tensor* dx_row_amax) {
  check_same_device("rmsnorm_backward", {&dx, &dw, &dy, &x, &w, &rstd, dresidual, dx_rounded, dx_amax, dx_row_amax});
  if (dx_amax) fp8_check_amax_out("rmsnorm_backward", *dx_amax);
  if (dx_row_amax) fp8_check_row_amax("rmsnorm_backward", *dx_row_amax, rows_of(x));
  TETRA_DISPATCH(dx.device(), rmsnorm_backward, dx, dw, dy, x, w, rstd, accumulate_dx, dresidual, dx_rounded,
                 dx_amax, dx_row_amax);
}
void rope_forward(Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, const Rope& rope, int64_t position) {
  TETRA_CHECK(position >= 0, "rope_forward: position ", position, " < 0");
  TETRA_DISPATCH(qkv.device(), rope_forward, qkv, n_heads, n_kv_heads, rope, position);
}
void attention_decode(Tensor& out, const Tensor& cache, int64_t length, int64_t n_heads, int64_t n_kv_heads) {
  check_same_device("attention_decode", {&out, &cache});
  TETRA_DISPATCH(out.device(), attention_decode, out, cache, length, n_heads, n_kv_heads);
}
void rope_backward(Tensor& dqkv, int64_t n_heads, int64_t n_kv_heads, const Rope& rope) {
  TETRA_DISPATCH(dqkv.device(), rope_backward, dqkv, n_heads, n_kv_heads, rope);
}

void swiglu_forward(Tensor& h, const Tensor& gate_up, Tensor* amax, Tensor* row_amax) {
  check_same_device("swiglu_forward", {&h, &gate_up, amax, row_amax});
  if (amax) fp8_check_amax_out("swiglu_forward", *amax);
  if (row_amax) fp8_check_row_amax("swiglu_forward", *row_amax, rows_of(gate_up));
  TETRA_DISPATCH(h.device(), swiglu_forward, h, gate_up, amax, row_amax);
}
void swiglu_backward(Tensor& d_gate_up, const Tensor& dh, const Tensor& gate_up, Tensor* amax, Tensor* row_amax) {
  check_same_device("swiglu_backward", {&d_gate_up, &dh, &gate_up, amax, row_amax});
  if (amax) fp8_check_amax_out("swiglu_backward", *amax);
  if (row_amax) fp8_check_row_amax("swiglu_backward", *row_amax, rows_of(gate_up));
  TETRA_DISPATCH(d_gate_up.device(), swiglu_backward, d_gate_up, dh, gate_up, amax, row_amax);
}
void moe_router_forward(Tensor& expert_ids, Tensor& weights, Tensor& counts, const Tensor& logits, const Tensor& bias,
                        const MoeRouting& routing, Tensor* load) {
  check_same_device("moe_router_forward", {&expert_ids, &weights, &counts, &logits, &bias, load});
  TETRA_DISPATCH(logits.device(), moe_router_forward, expert_ids, weights, counts, logits, bias, routing, load);
}
void moe_router_backward(Tensor& d_logits, const Tensor& d_weights, const Tensor& logits, const Tensor& expert_ids,
                         const MoeRouting& routing, const Tensor* d_prob_sums, bool accumulate) {
  check_same_device("moe_router_backward", {&d_logits, &d_weights, &logits, &expert_ids, d_prob_sums});
  TETRA_DISPATCH(logits.device(), moe_router_backward, d_logits, d_weights, logits, expert_ids, routing, d_prob_sums,
                 accumulate);
}
void moe_balance_loss(Tensor& loss_sum, Tensor& d_prob_sums, const Tensor& logits, const Tensor& expert_ids,
                      int64_t seq_len, float loss_scale, float grad_scale) {
  check_same_device("moe_balance_loss", {&loss_sum, &d_prob_sums, &logits, &expert_ids});
  TETRA_DISPATCH(logits.device(), moe_balance_loss, loss_sum, d_prob_sums, logits, expert_ids, seq_len, loss_scale,
                 grad_scale);
}
void moe_bias_update(Tensor& bias, const Tensor& load, float rate, const Tensor* control) {
  check_same_device("moe_bias_update", {&bias, &load, control});
  TETRA_DISPATCH(bias.device(), moe_bias_update, bias, load, rate, control);
}
void moe_permute_map(Tensor& offsets, Tensor& row_of, Tensor& slot_of, const Tensor& expert_ids) {
  check_same_device("moe_permute_map", {&offsets, &row_of, &slot_of, &expert_ids});
  TETRA_DISPATCH(expert_ids.device(), moe_permute_map, offsets, row_of, slot_of, expert_ids);
}
void moe_permute(Tensor& rows, const Tensor& x, const Tensor& slot_of, int64_t top_k, Tensor* row_amax) {
  check_same_device("moe_permute", {&rows, &x, &slot_of, row_amax});
  if (row_amax) fp8_check_row_amax("moe_permute", *row_amax, rows.ndim() == 2 ? rows.dim(0) : -1);
  TETRA_DISPATCH(x.device(), moe_permute, rows, x, slot_of, top_k, row_amax);
}
void moe_permute_backward(Tensor& dx, const Tensor& d_rows, const Tensor& row_of, bool accumulate) {
  check_same_device("moe_permute_backward", {&dx, &d_rows, &row_of});
  TETRA_DISPATCH(dx.device(), moe_permute_backward, dx, d_rows, row_of, accumulate);
}
void moe_unpermute(Tensor& y, const Tensor& rows, const Tensor& weights, const Tensor& row_of, bool accumulate) {
  check_same_device("moe_unpermute", {&y, &rows, &weights, &row_of});
  TETRA_DISPATCH(y.device(), moe_unpermute, y, rows, weights, row_of, accumulate);
}
void moe_unpermute_backward(Tensor& d_rows, Tensor& d_weights, const Tensor& dy, const Tensor& rows,
                            const Tensor& weights, const Tensor& row_of, Tensor* d_rows_amax) {
  check_same_device("moe_unpermute_backward", {&d_rows, &d_weights, &dy, &rows, &weights, &row_of, d_rows_amax});
  if (d_rows_amax && !d_rows.defined())
    TETRA_FAIL(Internal, "moe_unpermute_backward: d_rows_amax is of the rows written, and d_rows is not given");
  if (d_rows_amax)
    fp8_check_row_amax("moe_unpermute_backward", *d_rows_amax, d_rows.ndim() == 2 ? d_rows.dim(0) : -1);
  TETRA_DISPATCH(dy.device(), moe_unpermute_backward, d_rows, d_weights, dy, rows, weights, row_of, d_rows_amax);
}
void moe_sort_chunks(Tensor& out, const Tensor& in, const Tensor& chunk_counts, bool inverse) {
  check_same_device("moe_sort_chunks", {&out, &in, &chunk_counts});
  TETRA_DISPATCH(in.device(), moe_sort_chunks, out, in, chunk_counts, inverse);
}
void moe_chunk_offsets(Tensor& offsets, const Tensor& chunk_counts) {
  check_same_device("moe_chunk_offsets", {&offsets, &chunk_counts});
  TETRA_DISPATCH(chunk_counts.device(), moe_chunk_offsets, offsets, chunk_counts);
}
void moe_grouped_linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& offsets) {
  check_same_device("moe_grouped_linear_forward", {&y, &x, &w, &offsets});
  TETRA_DISPATCH(x.device(), moe_grouped_linear_forward, y, x, w, offsets);
}
void moe_grouped_linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& offsets) {
  check_same_device("moe_grouped_linear_backward_input", {&dx, &dy, &w, &offsets});
  TETRA_DISPATCH(dy.device(), moe_grouped_linear_backward_input, dx, dy, w, offsets);
}
void moe_grouped_linear_backward_weight(Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets,
                                        bool accumulate) {
  check_same_device("moe_grouped_linear_backward_weight", {&dw, &dy, &x, &offsets});
  TETRA_DISPATCH(dy.device(), moe_grouped_linear_backward_weight, dw, dy, x, offsets, accumulate);
}
int64_t shard_vocabulary(const char* op, const VocabShard& shard, int64_t rows) {
  if (shard.vocab == 0 && shard.begin == 0) return rows;
  if (shard.begin < 0 || shard.begin + rows > shard.vocab)
    TETRA_FAIL(Internal, op, ": vocabulary shard [", shard.begin, ", ", shard.begin + rows, ") outside [0, ",
               shard.vocab, ")");
  return shard.vocab;
}
void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& wte, const Tensor& wpe, int64_t seq_len,
                       VocabShard shard) {
  check_same_device("embedding_forward", {&y, &ids, &wte, &wpe});
  TETRA_DISPATCH(y.device(), embedding_forward, y, ids, wte, wpe, seq_len, shard);
}
void embedding_backward(Tensor& dwte, Tensor* dwpe, const Tensor& dy, const Tensor& ids, int64_t seq_len,
                        VocabShard shard) {
  check_same_device("embedding_backward", {&dwte, dwpe, &dy, &ids});
  TETRA_DISPATCH(dwte.device(), embedding_backward, dwte, dwpe, dy, ids, seq_len, shard);
}
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads) {
  check_same_device("attention_forward", {&out, &lse, &qkv});
  TETRA_DISPATCH(out.device(), attention_forward, out, lse, qkv, n_heads, n_kv_heads);
}
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int64_t n_heads, int64_t n_kv_heads) {
  check_same_device("attention_backward", {&dqkv, &dout, &qkv, &out, &lse});
  TETRA_DISPATCH(dqkv.device(), attention_backward, dqkv, dout, qkv, out, lse, n_heads, n_kv_heads);
}
void softmax_cross_entropy(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                           float grad_scale) {
  check_same_device("softmax_cross_entropy", {&losses, dlogits, &logits, &targets});
  TETRA_DISPATCH(losses.device(), softmax_cross_entropy, losses, dlogits, logits, targets, grad_scale);
}
void cross_entropy_shard_stats(Tensor& stats, const Tensor& logits, const Tensor& targets, VocabShard shard) {
  check_same_device("cross_entropy_shard_stats", {&stats, &logits, &targets});
  TETRA_DISPATCH(stats.device(), cross_entropy_shard_stats, stats, logits, targets, shard);
}
void cross_entropy_from_stats(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                              VocabShard shard, const Tensor& all_stats, float grad_scale) {
  check_same_device("cross_entropy_from_stats", {&losses, dlogits, &logits, &targets, &all_stats});
  TETRA_DISPATCH(losses.device(), cross_entropy_from_stats, losses, dlogits, logits, targets, shard, all_stats,
                 grad_scale);
}
void adamw_update(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h, Tensor* working) {
  check_same_device("adamw_update", {&master, &grad, &m, &v, working});
  TETRA_DISPATCH(master.device(), adamw_update, master, grad, m, v, h, working);
}
void sum_squares(Tensor& acc, const Tensor& x) {
  check_same_device("sum_squares", {&acc, &x});
  TETRA_DISPATCH(x.device(), sum_squares, acc, x);
}
void sum_accumulate(Tensor& acc, const Tensor& x) {
  check_same_device("sum_accumulate", {&acc, &x});
  TETRA_DISPATCH(x.device(), sum_accumulate, acc, x);
}
double sum_to_host(const Tensor& x) { TETRA_DISPATCH(x.device(), sum_to_host, x); }
void sum_partials(Tensor& out, const Tensor& parts, const Tensor& b, const Tensor* residual) {
  check_same_device("sum_partials", {&out, &parts, &b, residual});
  TETRA_DISPATCH(out.device(), sum_partials, out, parts, b, residual);
}
void fp8_quantize(Tensor& q, Tensor& scale, const Tensor& x, Fp8Scaling scaling, Tensor* q_t, Tensor* scale_t,
                  const Tensor* amax) {
  check_same_device("fp8_quantize", {&q, &scale, &x, q_t, scale_t, amax});
  TETRA_DISPATCH(x.device(), fp8_quantize, q, scale, x, scaling, q_t, scale_t, amax);
}
void fp8_amax(Tensor& amax, const Tensor& x) {
  check_same_device("fp8_amax", {&amax, &x});
  TETRA_DISPATCH(x.device(), fp8_amax, amax, x);
}
void fp8_dequantize(Tensor& y, const Tensor& q, const Tensor& scale, Fp8Scaling scaling) {
  check_same_device("fp8_dequantize", {&y, &q, &scale});
  TETRA_DISPATCH(y.device(), fp8_dequantize, y, q, scale, scaling);
}

void fp8_gemm(Tensor& y, const Tensor& a, const Tensor& a_scale, Fp8Scaling a_scaling, const Tensor& b,
              const Tensor& b_scale, Fp8Scaling b_scaling, bool accumulate, bool fast_accum,
              const Fp8Epilogue& epilogue) {
  const Fp8Epilogue& e = epilogue;
  check_same_device("fp8_gemm", {&y, &a, &a_scale, &b, &b_scale, e.bias, e.residual, e.gelu_pre, e.dgelu_pre, e.amax});
  if (fast_accum && (a_scaling != Fp8Scaling::Tensorwise || b_scaling != Fp8Scaling::Tensorwise))
    TETRA_FAIL(Internal, "fp8_gemm: fast accumulation is for tensorwise operands (block-scaled GEMMs promote every block)");
  fp8_check_epilogue("fp8_gemm", y, accumulate, e);
  TETRA_DISPATCH(y.device(), fp8_gemm, y, a, a_scale, a_scaling, b, b_scale, b_scaling, accumulate, fast_accum,
                 epilogue);
}
namespace {

using BadCodes = std::function<void(const std::string&)>;

// A blockwise layout's scales: fp32 of the shape `want`.
void check_code_scales(const Tensor& t, const Shape& want, const char* which, const BadCodes& bad) {
  if (!t.defined() || t.dtype() != DType::F32 || t.shape() != want)
    bad(std::string("have ") + which + " scales not fp32 " + shape_str(want));
}

// Blockwise weights' codes (ops.h Fp8GroupedCodes, Blocks128): the stack's blocks for the operand
// w [G, O, I], O a multiple of 128, with the scales of each layout they hold.
void check_grouped_block_codes(const Fp8GroupedCodes& codes, const Shape& w, const BadCodes& bad) {
  if (w.size() != 3 || w[1] % kFp8Block != 0) bad("are blocks of a stack whose experts' rows are not whole blocks");
  const int64_t GO = w[0] * w[1], I = w[2];
  check_code_scales(codes.scale, fp8_scale_shape(Fp8Scaling::Blocks128, GO, I), "block", bad);
  if (codes.q_t.defined())
    check_code_scales(codes.scale_t, fp8_scale_shape(Fp8Scaling::Blocks128, I, GO), "transposed block", bad);
}

// Blockwise row tensors' codes (ops.h Fp8GroupedCodes, Rows1x128) of x [R, cols]: the 1×128 scales of
// the rows and the runs' scales of the transposed layout, where each is held.
void check_grouped_run_codes(const Fp8GroupedCodes& codes, const Shape& x, int64_t G, const BadCodes& bad) {
  if (x.size() != 2 || x[1] % kFp8Block != 0) bad("are 1×128 groups of rows that are not whole groups wide");
  const Fp8Scaling rows = Fp8Scaling::Rows1x128;
  if (codes.q.defined()) check_code_scales(codes.scale, fp8_scale_shape(rows, x[0], x[1]), "row", bad);
  if (codes.q_t.defined())
    check_code_scales(codes.scale_t, fp8_scale_shape(rows, x[1], moe_grouped_fp8_padded_rows(x[0], G)), "run", bad);
}

// codes stand for `operand` cast as `cast` (ops.h Fp8GroupedCodes): its format, Tensorwise with one
// scale per expert (or blockwise rows' and weights' groups), each layout it holds of the operand's
// shape. rows: a row tensor (else weights).
void check_grouped_codes(const char* op, const char* what, const Fp8GroupedCodes* codes, const Shape& operand,
                         Fp8Cast cast, int64_t G, bool rows) {
  if (!codes) return;
  auto bad = [&](const std::string& why) { TETRA_FAIL(Internal, op, ": the codes of ", what, " ", why); };
  if (!codes->defined()) bad("are not cast (no scale)");
  const bool blocks = cast.scaling == Fp8Scaling::Blocks128 && !rows;
  const bool runs = cast.scaling == Fp8Scaling::Rows1x128 && rows;
  if (cast.scaling != Fp8Scaling::Tensorwise && !blocks && !runs)
    bad(std::string("are cast ahead in groups this operand's cast does not make (") +
        (rows ? "rows in 128×128 blocks)" : "weights in 1×128 groups)"));
  if (codes->format != cast.format)
    bad(std::string("are ") + dtype_name(codes->format) + ", the cast " + dtype_name(cast.format));
  if (blocks) check_grouped_block_codes(*codes, operand, bad);
  if (runs) check_grouped_run_codes(*codes, operand, G, bad);
  if (!blocks && !runs && (codes->scale.dtype() != DType::F32 || codes->scale.shape() != Shape{G}))
    bad("have scales not fp32 [G]");
  if (!codes->q.defined() && !codes->q_t.defined()) bad("hold neither layout");
  if (codes->q.defined() && (codes->q.shape() != operand || codes->q.dtype() != cast.format))
    bad("are not of the operand's shape " + shape_str(operand));
  if (!codes->q_t.defined()) return;
  if (operand.size() != (rows ? 2u : 3u)) bad("stand for an operand of shape " + shape_str(operand));
  const Shape want_t = rows     ? Shape{operand[1], moe_grouped_fp8_padded_rows(operand[0], G)}
                      : blocks ? Shape{operand[2], operand[0] * operand[1]}
                               : Shape{operand[0], operand[2], operand[1]};
  if (codes->q_t.shape() != want_t || codes->q_t.dtype() != cast.format)
    bad("have transposed codes not " + shape_str(want_t));
  if (rows && (!codes->padded_offsets.defined() || codes->padded_offsets.shape() != Shape{G + 1}))
    bad("have transposed codes without their padded offsets [G + 1]");
}

int64_t experts_of(const Tensor& offsets) { return offsets.numel() - 1; }

// The shape of a row operand (x [R, I] or dy [R, O]) of a grouped FP8 GEMM, where it may be undefined:
// its codes must then hold the layout this GEMM reads (`transposed`), R is `R` (the other row tensor's;
// < 0: none is given) and its width w's (or dw's) dimension `dim` (1: O, 2: I).
Shape coded_row_operand(const char* op, const char* name, const Tensor& x, const Fp8GroupedCodes* codes,
                        bool transposed, int64_t R, const Tensor& w, int dim) {
  if (x.defined()) return x.shape();
  const Tensor* layout = codes ? (transposed ? &codes->q_t : &codes->q) : nullptr;
  if (!layout || !layout->defined())
    TETRA_FAIL(Internal, op, ": ", name, " is not given and no codes stand for it in the ",
               transposed ? "transposed" : "row", " layout this GEMM reads");
  if (w.ndim() != 3) TETRA_FAIL(Internal, op, ": the weight is ", w.describe(), ", not [G, O, I]");
  if (R < 0) TETRA_FAIL(Internal, op, ": no row tensor is given to fix R (", name, " stands as codes alone)");
  return {R, w.dim(dim)};
}

int64_t rows_of_2d(const Tensor& t) { return t.defined() && t.ndim() == 2 ? t.dim(0) : -1; }

// moe_grouped_fp8_cast of blockwise weights w [G, O, I]: the stack [G·O, I] in 128×128 blocks with
// its transposed copy, one fp8_quantize on w's device.
void cast_grouped_weight_blocks(Fp8GroupedCodes& out, const Tensor& w, Fp8Cast cast) {
  const char* op = "moe_grouped_fp8_cast";
  if (w.ndim() != 3 || w.dim(1) % kFp8Block != 0)
    TETRA_FAIL(Internal, op, ": blockwise weights are cast ahead as whole stacks of [G, O, I] with O a multiple of ",
               kFp8Block, " (no block spanning two experts); w is ", w.describe());
  const int64_t GO = w.dim(0) * w.dim(1), I = w.dim(2);
  const Fp8Scaling blocks = Fp8Scaling::Blocks128;
  out = Fp8GroupedCodes{};
  out.format = cast.format;
  out.q = Tensor::empty(w.shape(), cast.format, w.device());
  out.scale = Tensor::empty(fp8_scale_shape(blocks, GO, I), DType::F32, w.device());
  out.q_t = Tensor::empty({I, GO}, cast.format, w.device());
  out.scale_t = Tensor::empty(fp8_scale_shape(blocks, I, GO), DType::F32, w.device());
  Tensor q_stack = out.q.view({GO, I});
  fp8_quantize(q_stack, out.scale, w.slice_flat(0, {GO, I}), blocks, &out.q_t, &out.scale_t);
}

}  // namespace

int64_t moe_grouped_fp8_padded_rows(int64_t R, int64_t G) { return (R + kFp8Block - 1) / kFp8Block * kFp8Block + kFp8Block * G; }

void moe_grouped_fp8_forward(Tensor& y, const Tensor& x, Fp8Cast x_cast, const Tensor& w, Fp8Cast w_cast,
                             const Tensor& offsets, const Fp8GroupedCodes* x_codes, const Fp8GroupedCodes* w_codes) {
  const char* op = "moe_grouped_fp8_forward";
  check_same_device(op, {&y, &x, &w, &offsets});
  const Shape x_shape = coded_row_operand(op, "x", x, x_codes, /*transposed=*/false, rows_of_2d(y), w, 2);
  check_grouped_codes(op, "x", x_codes, x_shape, x_cast, experts_of(offsets), true);
  check_grouped_codes(op, "w", w_codes, w.shape(), w_cast, experts_of(offsets), false);
  TETRA_DISPATCH(y.device(), moe_grouped_fp8_forward, y, x, x_cast, w, w_cast, offsets, x_codes, w_codes);
}
void moe_grouped_fp8_backward_input(Tensor& dx, const Tensor& dy, Fp8Cast dy_cast, const Tensor& w, Fp8Cast w_cast,
                                    const Tensor& offsets, const Fp8GroupedCodes* dy_codes,
                                    const Fp8GroupedCodes* w_codes) {
  const char* op = "moe_grouped_fp8_backward_input";
  check_same_device(op, {&dx, &dy, &w, &offsets});
  const Shape dy_shape = coded_row_operand(op, "dy", dy, dy_codes, /*transposed=*/false, rows_of_2d(dx), w, 1);
  check_grouped_codes(op, "dy", dy_codes, dy_shape, dy_cast, experts_of(offsets), true);
  check_grouped_codes(op, "w", w_codes, w.shape(), w_cast, experts_of(offsets), false);
  // Dispatched on the output: dy may be undefined, its codes standing for it.
  TETRA_DISPATCH(dx.device(), moe_grouped_fp8_backward_input, dx, dy, dy_cast, w, w_cast, offsets, dy_codes, w_codes);
}
void moe_grouped_fp8_backward_weight(Tensor& dw, const Tensor& dy, Fp8Cast dy_cast, const Tensor& x, Fp8Cast x_cast,
                                     const Tensor& offsets, bool accumulate, const Fp8GroupedCodes* dy_codes,
                                     const Fp8GroupedCodes* x_codes) {
  const char* op = "moe_grouped_fp8_backward_weight";
  check_same_device(op, {&dw, &dy, &x, &offsets});
  const Shape dy_shape = coded_row_operand(op, "dy", dy, dy_codes, /*transposed=*/true, rows_of_2d(x), dw, 1);
  check_grouped_codes(op, "dy", dy_codes, dy_shape, dy_cast, experts_of(offsets), true);
  const Shape x_shape = coded_row_operand(op, "x", x, x_codes, /*transposed=*/true, rows_of_2d(dy), dw, 2);
  check_grouped_codes(op, "x", x_codes, x_shape, x_cast, experts_of(offsets), true);
  // Dispatched on the output: dy or x may be undefined, their codes standing for them.
  TETRA_DISPATCH(dw.device(), moe_grouped_fp8_backward_weight, dw, dy, dy_cast, x, x_cast, offsets, accumulate,
                 dy_codes, x_codes);
}
void moe_grouped_fp8_cast(Fp8GroupedCodes& out, const Tensor& x, Fp8Cast cast, const Tensor* offsets,
                          const Tensor* row_amax, const Tensor* expert_amax) {
  const char* op = "moe_grouped_fp8_cast";
  check_same_device(op, {&x, offsets, row_amax, expert_amax});
  const bool blocks = cast.scaling == Fp8Scaling::Blocks128 && !offsets && !expert_amax;
  const bool runs = cast.scaling == Fp8Scaling::Rows1x128 && offsets && !row_amax;
  if (cast.scaling != Fp8Scaling::Tensorwise && !blocks && !runs)
    TETRA_FAIL(Internal, op, ": Tensorwise casts, blockwise weights in 128×128 blocks and blockwise rows in ",
               "1×128 groups are cast ahead (the blockwise ones without given amaxes); not this one");
  if (runs && (x.ndim() != 2 || x.dim(1) % kFp8Block != 0))
    TETRA_FAIL(Internal, op, ": blockwise rows are cast ahead in whole 1×128 groups; x is ", x.describe());
  if (cast.format != DType::F8E4M3 && cast.format != DType::F8E5M2)
    TETRA_FAIL(Internal, op, ": the format is ", dtype_name(cast.format), ", not F8E4M3 or F8E5M2");
  if (x.dtype() != DType::F32 && x.dtype() != DType::BF16) TETRA_FAIL(Internal, op, ": x is ", x.describe());
  if (offsets ? x.ndim() != 2 : x.ndim() != 3)
    TETRA_FAIL(Internal, op, ": x is ", x.describe(), offsets ? ", not rows [R, cols]" : ", not weights [G, O, I]");
  if (offsets && (offsets->dtype() != DType::I32 || offsets->ndim() != 1 || offsets->numel() < 1))
    TETRA_FAIL(Internal, op, ": offsets are ", offsets->describe(), ", not int32 [G + 1]");
  if (row_amax && !offsets) TETRA_FAIL(Internal, op, ": row_amax is for row tensors (with offsets), not weights");
  if (row_amax) fp8_check_row_amax(op, *row_amax, x.dim(0));
  if (expert_amax && offsets)
    TETRA_FAIL(Internal, op, ": expert_amax is for the weights [G, O, I], not row tensors (their row_amax)");
  if (expert_amax) {  // one amax per expert, the bits
    check_dtype(op, "expert_amax", *expert_amax, DType::U32);
    check_shape(op, "expert_amax", *expert_amax, {x.dim(0)});
  }
  if (blocks) return cast_grouped_weight_blocks(out, x, cast);
  TETRA_DISPATCH(x.device(), moe_grouped_fp8_cast, out, x, cast, offsets, row_amax, expert_amax);
}
void moe_permute_fp8_cast(Tensor& rows, Fp8GroupedCodes& out, const Tensor& x, const Tensor& slot_of, int64_t top_k,
                          const Tensor& offsets, Fp8Cast cast, const Tensor* weights, const Tensor* token_amax) {
  const char* op = "moe_permute_fp8_cast";
  check_same_device(op, {&rows, &x, &slot_of, &offsets, weights, token_amax});
  if (rows.defined()) {
    check_moe_permute(op, rows, x, slot_of, top_k);
  } else if (x.ndim() != 2 || slot_of.dtype() != DType::I32 || slot_of.ndim() != 1 || top_k < 1) {
    TETRA_FAIL(Internal, op, ": x ", x.describe(), ", slot_of ", slot_of.describe(), " and top_k ", top_k,
               " are not [N, C], int32 [R] and at least 1");
  }
  if (cast.scaling != Fp8Scaling::Tensorwise)
    TETRA_FAIL(Internal, op, ": only Tensorwise casts are cast ahead (group-scaled ones cast in their GEMMs)");
  if (cast.format != DType::F8E4M3 && cast.format != DType::F8E5M2)
    TETRA_FAIL(Internal, op, ": the format is ", dtype_name(cast.format), ", not F8E4M3 or F8E5M2");
  if (rows.defined() && rows.dtype() != DType::F32 && rows.dtype() != DType::BF16)
    TETRA_FAIL(Internal, op, ": rows are ", rows.describe());
  if (offsets.dtype() != DType::I32 || offsets.ndim() != 1 || offsets.numel() < 1)
    TETRA_FAIL(Internal, op, ": offsets are ", offsets.describe(), ", not int32 [G + 1]");
  if (weights) {
    check_dtype(op, "weights", *weights, DType::F32);
    check_shape(op, "weights", *weights, {x.dim(0), top_k});
  }
  if (token_amax) {  // one amax per row of x, the bits
    check_dtype(op, "token_amax", *token_amax, DType::U32);
    check_shape(op, "token_amax", *token_amax, {x.dim(0)});
  }
  TETRA_DISPATCH(x.device(), moe_permute_fp8_cast, rows, out, x, slot_of, top_k, offsets, cast, weights, token_amax);
}

void fp8_slice_amax(Tensor& amax, const Tensor& x, int64_t begin, int64_t rows, int64_t cols, Fp8Scaling scaling) {
  check_same_device("fp8_slice_amax", {&amax, &x});
  TETRA_DISPATCH(x.device(), fp8_slice_amax, amax, x, begin, rows, cols, scaling);
}
void fp8_slice_quantize(Tensor& q, Tensor& scale, const Tensor& x, const Tensor& amax, int64_t begin, int64_t rows,
                        int64_t cols, Fp8Scaling scaling) {
  check_same_device("fp8_slice_quantize", {&q, &scale, &x, &amax});
  TETRA_DISPATCH(x.device(), fp8_slice_quantize, q, scale, x, amax, begin, rows, cols, scaling);
}
void fp8_transpose(Tensor& q_t, Tensor& scale_t, const Tensor& q, const Tensor& scale, Fp8Scaling scaling) {
  check_same_device("fp8_transpose", {&q_t, &scale_t, &q, &scale});
  TETRA_DISPATCH(q.device(), fp8_transpose, q_t, scale_t, q, scale, scaling);
}

void step_control(Tensor& control, const Tensor& loss_sum, const Tensor& grad_sq, const Tensor& lr_table,
                  const StepControlConfig& cfg) {
  const char* op = "step_control";
  check_same_device(op, {&control, &loss_sum, &grad_sq, &lr_table});
  check_dtype(op, "control", control, DType::F64);
  check_shape(op, "control", control, {kStepControlSlots});
  check_dtype(op, "loss_sum", loss_sum, DType::F64);
  check_shape(op, "loss_sum", loss_sum, {1});
  check_dtype(op, "grad_sq", grad_sq, DType::F64);
  check_shape(op, "grad_sq", grad_sq, {1});
  check_dtype(op, "lr_table", lr_table, DType::F64);
  if (lr_table.ndim() != 1 || lr_table.numel() < 1)
    TETRA_FAIL(Internal, op, ": lr_table must be a non-empty vector, got ", lr_table.describe());
  TETRA_DISPATCH(control.device(), step_control, control, loss_sum, grad_sq, lr_table, cfg);
}

}  // namespace tetra::ops
