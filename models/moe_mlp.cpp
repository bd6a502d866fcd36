#include "models/moe_mlp.h"

#include <utility>

#include "models/fp8_grouped.h"
#include "runtime/ops.h"

namespace tetra {

MoeShape MoeShape::from(const MoeArgs& moe, int64_t d_model, int64_t expert_ffn) {
  MoeShape s;
  s.d_model = d_model;
  s.experts = moe.n_experts;
  s.top_k = moe.top_k;
  s.expert_ffn = expert_ffn;
  s.shared_ffn = moe.n_shared * expert_ffn;
  s.routing.top_k = moe.top_k;
  s.routing.n_group = moe.n_group;
  s.routing.topk_group = moe.topk_group;
  s.routing.route_scale = static_cast<float>(moe.route_scale);
  s.routing.force_balance = moe.force_balance;
  s.aux_loss_coef = static_cast<float>(moe.aux_loss_coef);
  return s;
}

void MoeMlp::init(const std::string& prefix, int block, const MoeShape& shape, int layer, float down_std) {
  prefix_ = prefix;
  block_ = block;
  shape_ = shape;
  const int64_t C = shape.d_model, E = shape.experts, F = shape.expert_ffn, Fs = shape.shared_ffn;
  gate_.init(prefix + ".gate", E, C, false, 0.02f, false, layer);
  bias_.name = prefix + ".gate.e_score_correction_bias";
  bias_.full_shape = bias_.local_shape = {E};
  bias_.layer_index = layer;
  bias_.weight_decay = false;
  bias_.trainable = false;
  bias_.init_constant = true;
  bias_.init_value = 0.0f;

  gate_up_.name = prefix + ".experts.gate_up_proj.weight";
  gate_up_.full_shape = gate_up_.local_shape = {E * 2 * F, C};
  gate_up_.placement.ep.kind = AxisPlacement::Kind::Expert;
  gate_up_.layer_index = layer;
  gate_up_.init_std = 0.02f;
  down_.name = prefix + ".experts.down_proj.weight";
  down_.full_shape = down_.local_shape = {E * C, F};
  down_.placement.ep.kind = AxisPlacement::Kind::Expert;
  down_.layer_index = layer;
  down_.init_std = down_std;
  // backward_weight is the only writer of the experts' gradients and stores at a step's first write
  // (Param::grad_whole_writes): preparing the buffers for a step need not zero them.
  gate_up_.grad_whole_writes = down_.grad_whole_writes = true;
  for (int64_t e = 0; e < E; ++e) {
    const std::string ex = prefix + ".experts." + std::to_string(e) + ".";
    gate_up_.parts.push_back({ex + "gate_proj.weight", e * 2 * F, F, 1});
    gate_up_.parts.push_back({ex + "up_proj.weight", e * 2 * F + F, F, 1});
    down_.parts.push_back({ex + "down_proj.weight", e * C, C, 1});
  }

  has_shared_ = Fs > 0;
  if (has_shared_) {
    shared_gate_up_.init(prefix + ".shared_experts.gate_up_proj", 2 * Fs, C, false, 0.02f, false, layer);
    shared_gate_up_.weight.parts = {{prefix + ".shared_experts.gate_proj.weight", 0, Fs, 1},
                                    {prefix + ".shared_experts.up_proj.weight", Fs, Fs, 1}};
    shared_down_.init(prefix + ".shared_experts.down_proj", C, Fs, false, down_std, false, layer);
  }
}

void MoeMlp::set_fp8(Fp8Recipe recipe) {
  fp8_ = recipe;
  gate_up_.fp8_grouped = fp8_grouped::casts_weights_once(recipe, 2 * shape_.expert_ffn);
  down_.fp8_grouped = fp8_grouped::casts_weights_once(recipe, shape_.d_model);
  gate_up_.fp8_group_rows = gate_up_.fp8_grouped ? 2 * shape_.expert_ffn : 0;
  down_.fp8_group_rows = down_.fp8_grouped ? shape_.d_model : 0;
  if (recipe != Fp8Recipe::None) gate_up_.fp8_scaling = down_.fp8_scaling = fp8_recipe_casts(recipe).weight.scaling;
  if (!has_shared_) return;
  shared_gate_up_.set_fp8(recipe);
  shared_down_.set_fp8(recipe);
}

void MoeMlp::collect(std::vector<Param*>& out) {
  gate_.collect(out);
  out.push_back(&bias_);
  out.push_back(&gate_up_);
  out.push_back(&down_);
  if (has_shared_) {
    shared_gate_up_.collect(out);
    shared_down_.collect(out);
  }
}

int64_t MoeMlp::local_experts() const { return gate_up_.local_shape[0] / (2 * shape_.expert_ffn); }

Tensor MoeMlp::local_gate_up() const {
  return gate_up_.value.view({local_experts(), 2 * shape_.expert_ffn, shape_.d_model});
}

Tensor MoeMlp::local_down() const { return down_.value.view({local_experts(), shape_.d_model, shape_.expert_ffn}); }

// ---- forward ---------------------------------------------------------------------------------

void MoeMlp::forward_route(MicroBatchContext& ctx, State& s, const Tensor& h, const Tensor& residual) {
  const int64_t N = h.dim(0), C = shape_.d_model, E = shape_.experts, k = shape_.top_k;
  const Device dev = ctx.device();
  s.h = h;
  s.residual = residual;
  // Router: fp32 logits of the working weights (Hugging Face computes F.linear in fp32).
  s.logits = ctx.fp32({N, E});
  ops::linear_forward(s.logits, h, gate_.weight.value, Tensor());
  s.expert_ids = Tensor::empty({N, k}, DType::I32, dev);
  s.weights = ctx.fp32({N, k});
  s.counts = Tensor::empty({E}, DType::I32, dev);
  const bool count = ctx.training && !s.recomputing;
  if (count && !load_.defined()) load_ = Tensor::zeros({E}, DType::I32, dev);
  ops::moe_router_forward(s.expert_ids, s.weights, s.counts, s.logits, bias_.value, shape_.routing,
                          count ? &load_ : nullptr);
  // Sequence-wise balance loss α·Σ_i f_i·P_i per sequence, averaged over the global batch's
  // sequences: the loss sum is divided by the global batch's tokens, so each sequence adds α·T·Σ;
  // its gradient is α / (sequences) = α·T·loss_grad_scale per unit of the sum.
  if (ctx.training && shape_.aux_loss_coef > 0 && !s.recomputing) {
    const int64_t T = ctx.seq_len, B = N / T;
    if (!ctx.aux_loss.defined()) ctx.aux_loss = Tensor::zeros({1}, DType::F64, dev);
    s.d_prob_sums = ctx.fp32({B, E});
    const float scale = shape_.aux_loss_coef * static_cast<float>(T);
    ops::moe_balance_loss(ctx.aux_loss, s.d_prob_sums, s.logits, s.expert_ids, T, scale, scale * ctx.loss_grad_scale);
  }
  s.offsets = Tensor::empty({E + 1}, DType::I32, dev);
  s.row_of = Tensor::empty({N, k}, DType::I32, dev);
  s.slot_of = Tensor::empty({N * k}, DType::I32, dev);
  ops::moe_permute_map(s.offsets, s.row_of, s.slot_of, s.expert_ids);
  // Without the exchange the rows are x_e; where this pass casts ahead, only their FP8 codes are made,
  // gathered from h in forward_experts.
  if (!permutes_with_cast(ctx)) {
    s.rows = ctx.activation({N * k, C});
    ops::moe_permute(s.rows, h, s.slot_of, k);
  }
  if (exchanging()) {
    s.recv_counts = Tensor::empty({E}, DType::I32, dev);
    s.ticket = ep_->issue_counts(s.recv_counts, s.counts, "counts " + prefix_);
  }
}

Tensor* MoeMlp::input_amax_slot(State& s, Device device) const {
  return has_shared_ && s.keep_fp8 ? shared_gate_up_.fp8_amax_slot(&s.s_gate_up_fp8, /*gradient=*/false, device)
                                   : nullptr;
}

Tensor* MoeMlp::input_row_amax_slot(const MicroBatchContext& ctx, State& s, int64_t N) const {
  if (!permutes_with_cast(ctx)) return nullptr;
  s.h_token_amax = Tensor::empty({N}, DType::U32, ctx.device());
  return &s.h_token_amax;
}

void MoeMlp::run_shared(MicroBatchContext& ctx, State& s, bool down_follows) {
  const int64_t N = s.h.dim(0), Fs = shape_.shared_ffn;
  s.s_gu = ctx.activation({N, 2 * Fs});
  shared_gate_up_.forward(s.s_gu, s.h, nullptr, ops::Activation::None, nullptr, s.keep_fp8 ? &s.s_gate_up_fp8 : nullptr);
  s.s_act = ctx.activation({N, Fs});
  Tensor* act_amax = down_follows && s.keep_fp8
                         ? shared_down_.fp8_amax_slot(&s.s_down_fp8, /*gradient=*/false, ctx.device())
                         : nullptr;
  ops::swiglu_forward(s.s_act, s.s_gu, act_amax);
}

void MoeMlp::forward_dispatch(MicroBatchContext& ctx, State& s) {
  const int64_t C = shape_.d_model;
  if (exchanging()) {
    ep_->wait(s.ticket);
    s.plan = ep_->plan(s.counts, s.recv_counts, ctx.device());
    s.recv = ctx.activation({s.plan.recv_total, C});
    s.ticket = ep_->issue_rows(s.recv, s.plan.recv_rows, s.rows, s.plan.send_rows, "dispatch " + prefix_);
  }
  // The shared experts need only h: they run while this micro-batch's rows travel.
  if (has_shared_) run_shared(ctx, s, /*down_follows=*/true);
}

int64_t MoeMlp::expert_rows(const State& s) const { return s.x_e.defined() ? s.x_e.dim(0) : s.row_of.numel(); }

void MoeMlp::run_experts(MicroBatchContext& ctx, State& s) {
  const int64_t R = expert_rows(s), F = shape_.expert_ffn;
  s.gu_e = ctx.activation({R, 2 * F});
  if (!s.x_codes.q.defined()) {  // the forward's were gathered in forward_experts; a recomputation's:
    s.x_codes = permutes_with_cast(ctx)
                    ? fp8_grouped::permute_rows(fp8_, s.h, s.slot_of, shape_.top_k, s.e_offsets, false, nullptr,
                                                &s.h_token_amax)
                    : cast_ahead(ctx, s.x_e, /*gradient=*/false, s.x_amax, s.e_offsets);
  }
  const Tensor w_gu = local_gate_up();
  const ops::Fp8GroupedCodes w_codes = fp8_grouped::step_weight(fp8_, gate_up_, w_gu);
  fp8_grouped::forward(fp8_, s.gu_e, s.x_e, w_gu, s.e_offsets, &s.x_codes, &w_codes);
  s.x_codes.q = Tensor();
  s.act_e = ctx.activation({R, F});
  ops::swiglu_forward(s.act_e, s.gu_e, nullptr, row_amax_slot(ctx, s.act_amax, R));
}

void MoeMlp::forward_experts(MicroBatchContext& ctx, State& s) {
  const int64_t C = shape_.d_model;
  if (exchanging()) {
    ep_->wait(s.ticket);
    s.x_e = ctx.activation({s.plan.recv_total, C});
    ops::moe_permute(s.x_e, s.recv, s.plan.to_expert, 1, row_amax_slot(ctx, s.x_amax, s.plan.recv_total));
    s.e_offsets = s.plan.offsets;
  } else {
    // x_e itself where this pass casts ahead: its codes alone, gathered from h (x_e stays undefined).
    if (permutes_with_cast(ctx))
      s.x_codes = fp8_grouped::permute_rows(fp8_, s.h, s.slot_of, shape_.top_k, s.offsets, false, nullptr,
                                            &s.h_token_amax);
    s.x_e = s.rows;
    s.e_offsets = s.offsets;
  }
  run_experts(ctx, s);
  const int64_t R = expert_rows(s);
  s.out_e = ctx.activation({R, C});
  s.act_codes = cast_ahead(ctx, s.act_e, /*gradient=*/false, s.act_amax, s.e_offsets);
  const Tensor w_down = local_down();
  const ops::Fp8GroupedCodes w_codes = fp8_grouped::step_weight(fp8_, down_, w_down);
  fp8_grouped::forward(fp8_, s.out_e, s.act_e, w_down, s.e_offsets, &s.act_codes, &w_codes);
  s.act_codes.q = Tensor();
  if (exchanging()) {
    // Back to source-major order, then to the ranks the rows came from.
    Tensor back = ctx.activation({R, C});
    ops::moe_permute(back, s.out_e, s.plan.to_source, 1);
    s.rows_out = ctx.activation({s.row_of.numel(), C});
    s.recv = back;  // kept alive until the exchange is waited for
    s.ticket = ep_->issue_rows(s.rows_out, s.plan.send_rows, s.recv, s.plan.recv_rows, "combine " + prefix_);
  } else {
    s.rows_out = s.out_e;
  }
}

Tensor MoeMlp::forward_combine(MicroBatchContext& ctx, State& s) {
  const int64_t N = s.h.dim(0), C = shape_.d_model;
  if (exchanging()) {
    ep_->wait(s.ticket);
    s.recv = Tensor();
  }
  s.y = ctx.activation({N, C});
  if (has_shared_) {
    shared_down_.forward_residual(s.y, s.s_act, s.residual, s.keep_fp8 ? &s.s_down_fp8 : nullptr);
  } else {
    ops::copy(s.y, s.residual);
  }
  ops::moe_unpermute(s.y, s.rows_out, s.weights, s.row_of, /*accumulate=*/true);
  // Backward keeps h, the routing (logits, ids, weights, row_of), the expert side (x_e, offsets,
  // gu_e, act_e), rows_out and the shared experts' hidden activations.
  Tensor y = s.y;
  s.residual = s.rows = s.counts = s.offsets = s.recv_counts = s.out_e = s.y = Tensor();
  if (s.x_e.defined()) s.slot_of = Tensor();  // else kept: a recomputation gathers x_e's codes from h again
  if (!ctx.training) s = State();
  return y;
}

Tensor MoeMlp::forward(MicroBatchContext& ctx, State& s, const Tensor& h, const Tensor& residual) {
  forward_route(ctx, s, h, residual);
  forward_dispatch(ctx, s);
  forward_experts(ctx, s);
  return forward_combine(ctx, s);
}

void MoeMlp::drop_hidden(State& s) {
  s.gu_e = s.act_e = s.s_gu = s.s_act = Tensor();
  s.act_codes = ops::Fp8GroupedCodes{};  // the weight gradient casts the recomputed act_e
}

bool MoeMlp::casts_ahead(const MicroBatchContext& ctx) const { return ctx.training && fp8_grouped::casts_ahead(fp8_); }

Tensor* MoeMlp::row_amax_slot(const MicroBatchContext& ctx, Tensor& slot, int64_t rows) const {
  return casts_ahead(ctx) ? fp8_grouped::row_amax_slot(fp8_, slot, rows, ctx.device()) : nullptr;
}

ops::Fp8GroupedCodes MoeMlp::cast_ahead(const MicroBatchContext& ctx, const Tensor& x, bool gradient, Tensor& amax,
                                        const Tensor& offsets) const {
  const Tensor measured = std::exchange(amax, Tensor());
  const bool ahead = ctx.training && fp8_grouped::casts_rows_ahead(fp8_, x.dim(1));
  return ahead ? fp8_grouped::cast_rows(fp8_, x, offsets, gradient, &measured) : ops::Fp8GroupedCodes{};
}

// ---- backward --------------------------------------------------------------------------------

void MoeMlp::backward_combine(MicroBatchContext& ctx, State& s, const Tensor& dy, Tensor dy_amax,
                              Tensor dy_row_amax) {
  const int64_t N = s.h.dim(0), C = shape_.d_model, k = shape_.top_k, Fs = shape_.shared_ffn;
  s.d_y = dy;
  s.dy_token_amax = std::move(dy_row_amax);
  // y = residual + shared + Σ_j w_j·rows_out[row_of[n, j]]
  s.d_weights = ctx.fp32({N, k});
  if (permutes_with_cast(ctx)) {
    // d_rows (d_out_e) is read only by its FP8 cast, which backward_experts gathers from dy and the
    // weights: the weights' gradient alone here.
    ops::moe_unpermute_backward(s.d_rows, s.d_weights, dy, s.rows_out, s.weights, s.row_of);
  } else {
    // Without the exchange d_rows is d_out_e: its rows' amaxes measured for the FP8 cast.
    s.d_rows = ctx.activation({N * k, C});
    ops::moe_unpermute_backward(s.d_rows, s.d_weights, dy, s.rows_out, s.weights, s.row_of,
                                exchanging() ? nullptr : row_amax_slot(ctx, s.d_out_amax, N * k));
  }
  s.rows_out = Tensor();
  if (exchanging()) {
    s.recv = ctx.activation({s.plan.recv_total, C});
    s.ticket = ep_->issue_rows(s.recv, s.plan.recv_rows, s.d_rows, s.plan.send_rows, "combine grad " + prefix_);
  }
  // The shared experts' input gradient while the rows' gradients travel.
  s.d_h = ctx.activation({N, C});
  if (has_shared_) {
    if (!s.s_act.defined()) {  // recompute mlp: h's transpose kept for W now
      s.keep_fp8 = true;
      run_shared(ctx, s, /*down_follows=*/false);
    }
    // The input gradients keep dyᵀ and d_s_guᵀ for W, their casts taking the amaxes measured for them.
    Tensor d_s_act = ctx.activation({N, Fs});
    shared_down_.hand_fp8_amax(&s.s_down_fp8, /*gradient=*/true, std::move(dy_amax));
    shared_down_.backward_input(d_s_act, dy, {}, /*accumulate=*/false, &s.s_down_fp8);
    s.d_s_gu = ctx.activation({N, 2 * Fs});
    ops::swiglu_backward(s.d_s_gu, d_s_act, s.s_gu,
                         shared_gate_up_.fp8_amax_slot(&s.s_gate_up_fp8, /*gradient=*/true, ctx.device()));
    s.s_gu = Tensor();  // W needs s_act and h
    shared_gate_up_.backward_input(s.d_h, s.d_s_gu, {}, /*accumulate=*/false, &s.s_gate_up_fp8);
  }
}

void MoeMlp::backward_experts(MicroBatchContext& ctx, State& s) {
  const int64_t C = shape_.d_model, F = shape_.expert_ffn;
  if (exchanging()) {
    ep_->wait(s.ticket);
    s.d_out_e = ctx.activation({s.plan.recv_total, C});
    ops::moe_permute(s.d_out_e, s.recv, s.plan.to_expert, 1, row_amax_slot(ctx, s.d_out_amax, s.plan.recv_total));
  } else {
    s.d_out_e = s.d_rows;
  }
  if (!s.gu_e.defined()) {  // recompute mlp (the weight gradient casts the recomputed act_e itself)
    run_experts(ctx, s);
    s.act_amax = Tensor();
  }
  const int64_t R = expert_rows(s);
  Tensor d_act = ctx.activation({R, F});
  // d_out_e's codes alone, gathered from dy times the routing weights where this pass permutes with
  // the cast (d_out_e stays undefined).
  s.d_out_codes = permutes_with_cast(ctx)
                      ? fp8_grouped::permute_rows(fp8_, s.d_y, s.slot_of, shape_.top_k, s.e_offsets,
                                                  /*gradient=*/true, &s.weights, &s.dy_token_amax)
                      : cast_ahead(ctx, s.d_out_e, /*gradient=*/true, s.d_out_amax, s.e_offsets);
  const Tensor w_down = local_down(), w_gu = local_gate_up();
  const ops::Fp8GroupedCodes down_codes = fp8_grouped::step_weight(fp8_, down_, w_down);
  fp8_grouped::backward_input(fp8_, d_act, s.d_out_e, w_down, s.e_offsets, &s.d_out_codes, &down_codes);
  s.d_out_codes.q = Tensor();
  s.d_gu_e = ctx.activation({R, 2 * F});
  ops::swiglu_backward(s.d_gu_e, d_act, s.gu_e, nullptr, row_amax_slot(ctx, s.d_gu_amax, R));
  s.gu_e = Tensor();  // W needs act_e and x_e
  Tensor d_x = ctx.activation({R, C});
  s.d_gu_codes = cast_ahead(ctx, s.d_gu_e, /*gradient=*/true, s.d_gu_amax, s.e_offsets);
  const ops::Fp8GroupedCodes gu_codes = fp8_grouped::step_weight(fp8_, gate_up_, w_gu);
  fp8_grouped::backward_input(fp8_, d_x, s.d_gu_e, w_gu, s.e_offsets, &s.d_gu_codes, &gu_codes);
  s.d_gu_codes.q = Tensor();
  if (exchanging()) {
    Tensor back = ctx.activation({R, C});
    ops::moe_permute(back, d_x, s.plan.to_source, 1);
    s.recv = back;
    s.d_rows = ctx.activation({s.row_of.numel(), C});
    s.ticket = ep_->issue_rows(s.d_rows, s.plan.send_rows, s.recv, s.plan.recv_rows, "dispatch grad " + prefix_);
  } else {
    s.d_rows = d_x;
  }
}

Tensor MoeMlp::backward_route(MicroBatchContext& ctx, State& s) {
  const int64_t N = s.h.dim(0), E = shape_.experts;
  if (exchanging()) {
    ep_->wait(s.ticket);
    s.recv = Tensor();
  }
  ops::moe_permute_backward(s.d_h, s.d_rows, s.row_of, /*accumulate=*/has_shared_);
  s.d_rows = Tensor();
  // Through the weights' normalisation and the sigmoid (the choice itself has no gradient), plus the
  // balance loss's gradient of the scores.
  s.d_logits = ctx.activation({N, E});
  ops::moe_router_backward(s.d_logits, s.d_weights, s.logits, s.expert_ids, shape_.routing,
                           s.d_prob_sums.defined() ? &s.d_prob_sums : nullptr);
  gate_.backward_input(s.d_h, s.d_logits, /*overlap=*/{}, /*accumulate=*/true);
  s.logits = s.d_weights = s.d_prob_sums = s.rows = Tensor();
  Tensor dh = s.d_h;
  s.d_h = Tensor();
  return dh;
}

void MoeMlp::backward_weight(State& s) {
  run_in_order(weight_pieces(s));
  weight_pieces_done(s);
}

std::vector<DevicePiece> MoeMlp::weight_pieces(State& s) {
  const int64_t El = local_experts(), C = shape_.d_model, F = shape_.expert_ffn;
  // The grouped GEMMs write every element of the experts' gradients (an expert without rows gets
  // zeros; runtime/ops.h), and these calls are their only writers: where the buffer holds nothing
  // of this step yet (Param::grad_empty: the step's first micro-batch to reach this layer, in
  // whatever order a schedule runs them) they store, sparing the read of the whole [El, O, I]
  // gradient per tile and the buffer's zeroing (docs/moe.md "Weight gradients"); later ones add.
  // Largest first: gate_up (2·F·C per expert row), down (F·C), then the shared experts' and the router's.
  std::vector<DevicePiece> pieces;
  pieces.push_back([this, &s, El, F, C] {
    Tensor d_gate_up = gate_up_.grad.view({El, 2 * F, C});
    fp8_grouped::backward_weight(fp8_, d_gate_up, s.d_gu_e, s.x_e, s.e_offsets,
                                 /*accumulate=*/!gate_up_.first_grad_write(), &s.d_gu_codes, &s.x_codes);
  });
  pieces.push_back([this, &s, El, F, C] {
    Tensor d_down = down_.grad.view({El, C, F});
    fp8_grouped::backward_weight(fp8_, d_down, s.d_out_e, s.act_e, s.e_offsets,
                                 /*accumulate=*/!down_.first_grad_write(), &s.d_out_codes, &s.act_codes);
  });
  if (has_shared_) {
    pieces.push_back([this, &s] { shared_gate_up_.backward_weight(s.d_s_gu, s.h, Tensor(), &s.s_gate_up_fp8); });
    pieces.push_back([this, &s] { shared_down_.backward_weight(s.d_y, s.s_act, Tensor(), &s.s_down_fp8); });
  }
  pieces.push_back([this, &s] { gate_.backward_weight(s.d_logits, s.h); });
  return pieces;
}

void MoeMlp::weight_pieces_done(State& s) {
  s.x_codes = s.act_codes = s.d_out_codes = s.d_gu_codes = ops::Fp8GroupedCodes{};
  if (has_shared_) s.s_gate_up_fp8 = s.s_down_fp8 = Fp8Saved{};
}

}  // namespace tetra
