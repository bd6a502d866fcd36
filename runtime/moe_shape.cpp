#include "runtime/moe_shape.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "runtime/error.h"

namespace tetra {

namespace {

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// A matrix of per-token rows: [..., cols] read as [rows, cols]; returns rows.
int64_t token_rows(const char* op, const char* what, const Tensor& t) {
  if (!t.defined() || t.ndim() < 1) TETRA_FAIL(Internal, op, ": ", what, " must be [..., d], got ", t.describe());
  return t.dim(-1) == 0 ? 0 : t.numel() / t.dim(-1);
}

void check_2d(const char* op, const char* what, const Tensor& t, const char* layout) {
  if (!t.defined() || t.ndim() != 2) TETRA_FAIL(Internal, op, ": ", what, " must be 2-D ", layout, ", got ", t.describe());
}

// row_of int32 [N, k] of the N tokens of `tokens`; returns k.
int64_t check_row_of(const char* op, const Tensor& row_of, int64_t N, const char* tokens) {
  check_dtype(op, "row_of", row_of, DType::I32);
  check_2d(op, "row_of", row_of, "[N, k]");
  if (row_of.dim(0) != N)
    TETRA_FAIL(Internal, op, ": row_of ", row_of.describe(), " must have ", tokens, "'s N = ", N, " rows");
  return row_of.dim(1);
}

// Routed rows [R, d] of `tokens`' width d; returns R.
int64_t check_rows_like(const char* op, const char* what, const Tensor& rows, int64_t d, const char* tokens) {
  check_2d(op, what, rows, "[R, d]");
  if (rows.dim(1) != d)
    TETRA_FAIL(Internal, op, ": ", what, " ", rows.describe(), " must be [R, d = ", d, "] like ", tokens);
  return rows.dim(0);
}

// Tensors that are only read must not share memory with an output.
void check_outputs_disjoint(const char* op, const Tensor& out, const char* out_name,
                            std::initializer_list<std::pair<const char*, const Tensor*>> ins) {
  for (const auto& [name, t] : ins)
    if (t != nullptr && t->defined() && out.defined())
      check_disjoint(op, (std::string(name) + " (read while " + out_name + " is written)").c_str(), out, *t);
}

// expert_ids int32 [N, k]; returns k.
int64_t check_ids(const char* op, const char* what, const Tensor& ids, int64_t N) {
  check_dtype(op, what, ids, DType::I32);
  check_2d(op, what, ids, "[N, k]");
  if (ids.dim(0) != N) TETRA_FAIL(Internal, op, ": ", what, " ", ids.describe(), " must have N = ", N, " rows");
  if (ids.dim(1) < 1) TETRA_FAIL(Internal, op, ": ", what, " ", ids.describe(), " must have k ≥ 1 columns");
  return ids.dim(1);
}

}  // namespace

void check_moe_routing(const char* op, const ops::MoeRouting& r, int64_t E) {
  if (E < 1) TETRA_FAIL(Internal, op, ": the router needs at least one expert, got E = ", E);
  if (r.top_k < 1 || r.top_k > E)
    TETRA_FAIL(Internal, op, ": top_k = ", r.top_k, " must be in [1, E = ", E, "]");
  if (r.n_group < 1 || E % r.n_group != 0)
    TETRA_FAIL(Internal, op, ": n_group = ", r.n_group, " must divide the E = ", E, " experts");
  if (r.topk_group < 1 || r.topk_group > r.n_group)
    TETRA_FAIL(Internal, op, ": topk_group = ", r.topk_group, " must be in [1, n_group = ", r.n_group, "]");
  const int64_t group_size = E / r.n_group;
  if (r.n_group > 1 && group_size < 2)
    TETRA_FAIL(Internal, op, ": with n_group = ", r.n_group, " > 1 each group scores its two best experts, so it",
               " needs ≥ 2 experts; E = ", E, " gives ", group_size);
  if (r.top_k > r.topk_group * group_size)
    TETRA_FAIL(Internal, op, ": top_k = ", r.top_k, " exceeds the ", r.topk_group * group_size,
               " experts of the topk_group = ", r.topk_group, " eligible groups of ", group_size);
  if (!std::isfinite(r.route_scale))
    TETRA_FAIL(Internal, op, ": route_scale must be finite, got ", r.route_scale);
}

MoeRouterDims check_moe_router_forward(const char* op, const Tensor& expert_ids, const Tensor& weights,
                                       const Tensor& counts, const Tensor& logits, const Tensor& bias,
                                       const ops::MoeRouting& r, const Tensor* load) {
  check_dtype(op, "logits", logits, DType::F32);
  check_2d(op, "logits", logits, "[N, E]");
  const int64_t N = logits.dim(0), E = logits.dim(1);
  check_moe_routing(op, r, E);
  check_dtype(op, "bias", bias, DType::F32);
  check_shape(op, "bias", bias, {E});
  const int64_t k = r.top_k;
  check_dtype(op, "expert_ids", expert_ids, DType::I32);
  check_shape(op, "expert_ids", expert_ids, {N, k});
  check_dtype(op, "weights", weights, DType::F32);
  check_shape(op, "weights", weights, {N, k});
  check_dtype(op, "counts", counts, DType::I32);
  check_shape(op, "counts", counts, {E});
  const bool with_load = load != nullptr && load->defined();
  if (with_load) {
    check_dtype(op, "load", *load, DType::I32);
    check_shape(op, "load", *load, {E});
  }
  if (N * k > kMaxInt32) TETRA_FAIL(Internal, op, ": N·k = ", N * k, " routed slots exceed int32");
  check_same_device(op, {&expert_ids, &weights, &counts, &logits, &bias, with_load ? load : nullptr});
  for (const Tensor* out : {&expert_ids, &weights, &counts}) {
    check_outputs_disjoint(op, *out, "an output", {{"logits", &logits}, {"bias", &bias}});
    if (with_load) check_disjoint(op, "load", *out, *load);
  }
  check_disjoint(op, "weights", expert_ids, weights);
  check_disjoint(op, "counts", expert_ids, counts);
  check_disjoint(op, "counts", weights, counts);
  return {N, E, k, E / r.n_group};
}

MoeRouterDims check_moe_router_backward(const char* op, const Tensor& d_logits, const Tensor& d_weights,
                                        const Tensor& logits, const Tensor& expert_ids, const ops::MoeRouting& r,
                                        const Tensor* d_prob_sums, int64_t* seq_len) {
  check_dtype(op, "logits", logits, DType::F32);
  check_2d(op, "logits", logits, "[N, E]");
  const int64_t N = logits.dim(0), E = logits.dim(1);
  check_moe_routing(op, r, E);
  const int64_t k = r.top_k;
  check_dtype(op, "expert_ids", expert_ids, DType::I32);
  check_shape(op, "expert_ids", expert_ids, {N, k});
  check_dtype(op, "d_weights", d_weights, DType::F32);
  check_shape(op, "d_weights", d_weights, {N, k});
  if (!d_logits.defined()) TETRA_FAIL(Internal, op, ": d_logits is undefined");
  check_shape(op, "d_logits", d_logits, {N, E});
  *seq_len = 0;
  const bool with_prob = d_prob_sums != nullptr && d_prob_sums->defined();
  if (with_prob) {
    check_dtype(op, "d_prob_sums", *d_prob_sums, DType::F32);
    check_2d(op, "d_prob_sums", *d_prob_sums, "[B, E]");
    const int64_t B = d_prob_sums->dim(0);
    if (d_prob_sums->dim(1) != E || B < 1 || N % B != 0)
      TETRA_FAIL(Internal, op, ": d_prob_sums ", d_prob_sums->describe(), " must be [B, E = ", E,
                 "] with B ≥ 1 sequences dividing the N = ", N, " tokens");
    *seq_len = N / B;
  }
  check_same_device(op, {&d_logits, &d_weights, &logits, &expert_ids, with_prob ? d_prob_sums : nullptr});
  check_outputs_disjoint(op, d_logits, "d_logits",
                         {{"d_weights", &d_weights}, {"logits", &logits}, {"expert_ids", &expert_ids},
                          {"d_prob_sums", with_prob ? d_prob_sums : nullptr}});
  return {N, E, k, E / r.n_group};
}

int64_t check_moe_balance_loss(const char* op, const Tensor& loss_sum, const Tensor& d_prob_sums,
                               const Tensor& logits, const Tensor& expert_ids, int64_t seq_len) {
  check_dtype(op, "logits", logits, DType::F32);
  check_2d(op, "logits", logits, "[N, E]");
  const int64_t N = logits.dim(0), E = logits.dim(1);
  if (E < 1) TETRA_FAIL(Internal, op, ": logits ", logits.describe(), " has no experts");
  check_ids(op, "expert_ids", expert_ids, N);
  if (seq_len < 1 || N % seq_len != 0)
    TETRA_FAIL(Internal, op, ": seq_len = ", seq_len, " must be ≥ 1 and divide the N = ", N, " tokens");
  const int64_t B = N / seq_len;
  check_dtype(op, "loss_sum", loss_sum, DType::F64);
  check_shape(op, "loss_sum", loss_sum, {1});
  check_dtype(op, "d_prob_sums", d_prob_sums, DType::F32);
  check_shape(op, "d_prob_sums", d_prob_sums, {B, E});
  check_same_device(op, {&loss_sum, &d_prob_sums, &logits, &expert_ids});
  for (const Tensor* out : {&loss_sum, &d_prob_sums})
    check_outputs_disjoint(op, *out, "an output", {{"logits", &logits}, {"expert_ids", &expert_ids}});
  check_disjoint(op, "loss_sum", d_prob_sums, loss_sum);
  return B;
}

void check_moe_bias_update(const char* op, const Tensor& bias, const Tensor& load, const Tensor* control) {
  check_dtype(op, "bias", bias, DType::F32);
  if (bias.ndim() != 1 || bias.numel() < 1) TETRA_FAIL(Internal, op, ": bias must be [E], got ", bias.describe());
  check_dtype(op, "load", load, DType::I32);
  check_shape(op, "load", load, bias.shape());
  check_same_device(op, {&bias, &load});
  check_disjoint(op, "load", bias, load);
  if (control) {
    check_dtype(op, "control", *control, DType::F64);
    check_shape(op, "control", *control, {kStepControlSlots});
    check_same_device(op, {&bias, control});
  }
}

MoeRowDims check_moe_permute_map(const char* op, const Tensor& offsets, const Tensor& row_of, const Tensor& slot_of,
                                 const Tensor& expert_ids) {
  check_dtype(op, "expert_ids", expert_ids, DType::I32);
  check_2d(op, "expert_ids", expert_ids, "[N, k]");
  const int64_t N = expert_ids.dim(0), k = expert_ids.dim(1);
  if (k < 1) TETRA_FAIL(Internal, op, ": expert_ids ", expert_ids.describe(), " must have k ≥ 1 columns");
  if (N * k > kMaxInt32) TETRA_FAIL(Internal, op, ": N·k = ", N * k, " routed slots exceed int32");
  check_dtype(op, "offsets", offsets, DType::I32);
  if (offsets.ndim() != 1 || offsets.numel() < 2)
    TETRA_FAIL(Internal, op, ": offsets must be [E + 1] with E ≥ 1 experts, got ", offsets.describe());
  check_dtype(op, "row_of", row_of, DType::I32);
  check_shape(op, "row_of", row_of, {N, k});
  check_dtype(op, "slot_of", slot_of, DType::I32);
  check_shape(op, "slot_of", slot_of, {N * k});
  check_same_device(op, {&offsets, &row_of, &slot_of, &expert_ids});
  for (const Tensor* out : {&offsets, &row_of, &slot_of})
    check_outputs_disjoint(op, *out, "an output", {{"expert_ids", &expert_ids}});
  check_disjoint(op, "row_of", offsets, row_of);
  check_disjoint(op, "slot_of", offsets, slot_of);
  check_disjoint(op, "slot_of", row_of, slot_of);
  return {N, k, N * k, 0};
}

MoeRowDims check_moe_permute(const char* op, const Tensor& rows, const Tensor& x, const Tensor& slot_of,
                             int64_t top_k) {
  const int64_t N = token_rows(op, "x", x), d = x.dim(-1);
  const int64_t R = check_rows_like(op, "rows", rows, d, "x");
  check_dtype(op, "slot_of", slot_of, DType::I32);
  check_shape(op, "slot_of", slot_of, {R});
  if (top_k < 1) TETRA_FAIL(Internal, op, ": top_k must be ≥ 1, got ", top_k);
  check_same_device(op, {&rows, &x, &slot_of});
  check_outputs_disjoint(op, rows, "rows", {{"x", &x}, {"slot_of", &slot_of}});
  return {N, top_k, R, d};
}

MoeRowDims check_moe_permute_backward(const char* op, const Tensor& dx, const Tensor& d_rows, const Tensor& row_of) {
  const int64_t N = token_rows(op, "dx", dx), d = dx.dim(-1);
  const int64_t k = check_row_of(op, row_of, N, "dx");
  const int64_t R = check_rows_like(op, "d_rows", d_rows, d, "dx");
  check_same_device(op, {&dx, &d_rows, &row_of});
  check_outputs_disjoint(op, dx, "dx", {{"d_rows", &d_rows}, {"row_of", &row_of}});
  return {N, k, R, d};
}

MoeRowDims check_moe_unpermute(const char* op, const Tensor& y, const Tensor& rows, const Tensor& weights,
                               const Tensor& row_of) {
  const int64_t N = token_rows(op, "y", y), d = y.dim(-1);
  const int64_t k = check_row_of(op, row_of, N, "y");
  check_dtype(op, "weights", weights, DType::F32);
  check_shape(op, "weights", weights, {N, k});
  const int64_t R = check_rows_like(op, "rows", rows, d, "y");
  check_same_device(op, {&y, &rows, &weights, &row_of});
  check_outputs_disjoint(op, y, "y", {{"rows", &rows}, {"weights", &weights}, {"row_of", &row_of}});
  return {N, k, R, d};
}

MoeRowDims check_moe_unpermute_backward(const char* op, const Tensor& d_rows, const Tensor& d_weights,
                                        const Tensor& dy, const Tensor& rows, const Tensor& weights,
                                        const Tensor& row_of) {
  const int64_t N = token_rows(op, "dy", dy), d = dy.dim(-1);
  const int64_t k = check_row_of(op, row_of, N, "dy");
  check_dtype(op, "weights", weights, DType::F32);
  check_shape(op, "weights", weights, {N, k});
  check_dtype(op, "d_weights", d_weights, DType::F32);
  check_shape(op, "d_weights", d_weights, {N, k});
  const int64_t R = check_rows_like(op, "rows", rows, d, "dy");
  if (d_rows.defined()) check_shape(op, "d_rows", d_rows, rows.shape());  // undefined: d_weights alone
  check_same_device(op, {&d_rows, &d_weights, &dy, &rows, &weights, &row_of});
  for (const Tensor* out : {&d_rows, &d_weights})
    check_outputs_disjoint(op, *out, "an output",
                           {{"dy", &dy}, {"rows", &rows}, {"weights", &weights}, {"row_of", &row_of}});
  check_disjoint(op, "d_weights", d_rows, d_weights);
  return {N, k, R, d};
}

MoeRowDims check_moe_sort_chunks(const char* op, const Tensor& out, const Tensor& in, const Tensor& chunk_counts) {
  check_2d(op, "in", in, "[R, d]");
  check_shape(op, "out", out, in.shape());
  check_dtype(op, "chunk_counts", chunk_counts, DType::I32);
  check_2d(op, "chunk_counts", chunk_counts, "[A, B] (ranks × experts)");
  check_same_device(op, {&out, &in, &chunk_counts});
  check_outputs_disjoint(op, out, "out", {{"in", &in}, {"chunk_counts", &chunk_counts}});
  if (in.dim(0) > kMaxInt32) TETRA_FAIL(Internal, op, ": R = ", in.dim(0), " rows exceed int32");
  return {0, 0, in.dim(0), in.dim(1)};
}

void check_moe_chunk_offsets(const char* op, const Tensor& offsets, const Tensor& chunk_counts) {
  check_dtype(op, "chunk_counts", chunk_counts, DType::I32);
  check_2d(op, "chunk_counts", chunk_counts, "[A, B] (ranks × experts)");
  check_dtype(op, "offsets", offsets, DType::I32);
  check_shape(op, "offsets", offsets, {chunk_counts.dim(1) + 1});
  check_same_device(op, {&offsets, &chunk_counts});
  check_disjoint(op, "chunk_counts", offsets, chunk_counts);
}

namespace {

// w [G, O, I] and offsets int32 [G + 1]; returns G.
int64_t check_grouped_weight(const char* op, const char* what, const Tensor& w, const Tensor& offsets) {
  if (!w.defined() || w.ndim() != 3)
    TETRA_FAIL(Internal, op, ": ", what, " must be 3-D [G, O, I] (one [O, I] weight per expert), got ", w.describe());
  check_dtype(op, "offsets", offsets, DType::I32);
  check_shape(op, "offsets", offsets, {w.dim(0) + 1});
  return w.dim(0);
}

void check_rows_fit(const char* op, int64_t R) {
  if (R > kMaxInt32) TETRA_FAIL(Internal, op, ": R = ", R, " rows exceed int32 offsets");
}

struct Operand {
  const char* name;
  const Tensor& t;
};

// What the three grouped GEMMs check alike: w [G, O, I] with offsets int32 [G + 1]; `lead` fixes R and
// is [R, I] (forward: x) or [R, O] (backward: dy); `rows` is the other row tensor, [R, O] or [R, I]
// then. The output is w (backward weight) or `rows`; everything on one device, the output apart from
// what is read. coded: a row tensor that is only read (x, dy) may be undefined, FP8 codes standing for
// it (ops.h moe_grouped_fp8_*); R is then the other row tensor's.
MoeGemmDims check_grouped_gemm(const char* op, Operand w, Operand lead, Operand rows, bool forward, bool w_is_output,
                               const Tensor& offsets, bool coded = false) {
  const int64_t G = check_grouped_weight(op, w.name, w.t, offsets), O = w.t.dim(1), I = w.t.dim(2);
  // Only inputs may be undefined: `rows` is one where the weight is the output.
  const bool lead_given = lead.t.defined() || !coded, rows_given = rows.t.defined() || !coded || !w_is_output;
  const Operand& fixing = lead_given ? lead : rows;
  check_2d(op, fixing.name, fixing.t, lead_given == forward ? "[R, I]" : "[R, O]");
  const int64_t R = fixing.t.dim(0);
  if (lead_given) check_shape(op, lead.name, lead.t, {R, forward ? I : O});
  if (rows_given) check_shape(op, rows.name, rows.t, {R, forward ? O : I});
  check_rows_fit(op, R);
  const Operand out = w_is_output ? w : rows, in = w_is_output ? rows : w;
  check_same_device(op, {&out.t, &lead.t, &in.t, &offsets});
  check_outputs_disjoint(op, out.t, out.name, {{lead.name, &lead.t}, {in.name, &in.t}, {"offsets", &offsets}});
  return {G, R, O, I};
}

}  // namespace

MoeGemmDims check_moe_grouped_forward(const char* op, const Tensor& y, const Tensor& x, const Tensor& w,
                                      const Tensor& offsets, bool coded) {
  return check_grouped_gemm(op, {"w", w}, {"x", x}, {"y", y}, /*forward=*/true, /*w_is_output=*/false, offsets,
                            coded);
}

MoeGemmDims check_moe_grouped_backward_input(const char* op, const Tensor& dx, const Tensor& dy, const Tensor& w,
                                             const Tensor& offsets, bool coded) {
  return check_grouped_gemm(op, {"w", w}, {"dy", dy}, {"dx", dx}, /*forward=*/false, /*w_is_output=*/false, offsets,
                            coded);
}

MoeGemmDims check_moe_grouped_backward_weight(const char* op, const Tensor& dw, const Tensor& dy, const Tensor& x,
                                              const Tensor& offsets, bool coded) {
  return check_grouped_gemm(op, {"dw", dw}, {"dy", dy}, {"x", x}, /*forward=*/false, /*w_is_output=*/true, offsets,
                            coded);
}

}  // namespace tetra
