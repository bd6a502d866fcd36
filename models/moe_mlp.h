// MoeMlp: DeepSeek-V3's mixture-of-experts MLP (Hugging Face DeepseekV3MoE), the MLP of a MoE
// block (models/llama_moe_block.h), on h [N, d] (the post-attention norm's output), N = B·T tokens:
//   logits = h · gateᵀ (fp32 [N, E]); s = sigmoid(logits); experts chosen by top-k of s + bias
//   (group-limited with n_group > 1); weights = route_scale · the chosen s normalised to sum 1
//   routed = Σ_j weights[n, j] · expert_{id[n, j]}(h[n])        expert(x) = down(silu(gate·x) · up·x)
//   shared = shared_experts(h)  (one SwiGLU of width n_shared·expert_ffn; absent with n_shared 0)
//   y = residual + shared + routed
// Dropless: every token reaches its k experts. The router's bias (e_score_correction_bias, [E]) is
// a buffer (Param::trainable false) updated after each optimizer step from the step's global loads
// (models/moe_balance.h); with aux_loss_coef α > 0 the sequence-wise balance loss is added to the
// loss (MicroBatchContext::aux_loss).
//
// Parameters (Hugging Face's names under PREFIX = model.layers.N.mlp):
//   PREFIX.gate.weight [E, d]  PREFIX.gate.e_score_correction_bias [E] (buffer)
//   PREFIX.experts.gate_up_proj.weight [E·2F, d]: expert e's gate_proj then up_proj rows, stored as
//     PREFIX.experts.e.{gate,up}_proj.weight [F, d]; PREFIX.experts.down_proj.weight [E·d, F]:
//     PREFIX.experts.e.down_proj.weight [d, F]. Both expert-owned (placement.ep Expert): with
//     expert parallelism a rank holds the rows of its experts only.
//   PREFIX.shared_experts.gate_up_proj.weight [2·Fs, d] (gate_proj, up_proj), PREFIX.shared_experts.
//     down_proj.weight [d, Fs].
//
// The forward and the input backward run in phases split by the expert-parallel exchanges (the
// phase functions below, in order), so that an executor with two micro-batches in flight can run
// one's phase while the other's all-to-all is in flight (ARCHITECTURE.md §3 "Mixture of experts").
// Without expert parallelism nothing is exchanged and the phases run back to back. Every op of the
// layer is called from here, so a change of the MoE op API stays in this file.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/layer.h"
#include "models/model_args.h"
#include "models/modules.h"
#include "parallel/expert/expert_parallel.h"
#include "runtime/ops.h"
#include "runtime/stream_fanout.h"

namespace tetra {

struct MoeShape {
  int64_t d_model = 0;
  int64_t experts = 0;      // E
  int64_t top_k = 1;        // k
  int64_t expert_ffn = 0;   // F
  int64_t shared_ffn = 0;   // Fs = n_shared·F; 0 = no shared experts
  ops::MoeRouting routing;  // top_k, groups, route_scale, force_balance
  float aux_loss_coef = 0;  // α
  static MoeShape from(const MoeArgs& moe, int64_t d_model, int64_t expert_ffn);
};

class MoeMlp {
 public:
  // `prefix`: "model.layers.N.mlp"; `block`: N; `layer`: the owning Layer's index; `down_std`: the
  // init std of the projections back into the residual stream.
  void init(const std::string& prefix, int block, const MoeShape& shape, int layer, float down_std);
  // The routed experts' grouped GEMMs (models/fp8_grouped.h) and the shared experts' projections in
  // FP8 under `recipe` (models/fp8_linear.h); the router stays in the working dtype.
  void set_fp8(Fp8Recipe recipe);
  int block() const { return block_; }
  void collect(std::vector<Param*>& out);  // gate, bias, experts, shared experts
  const MoeShape& shape() const { return shape_; }
  const std::string& prefix() const { return prefix_; }

  // Expert parallelism (null: every expert here, nothing exchanged). The expert Params must hold
  // this rank's experts' rows (local_shape).
  void set_expert_parallel(ExpertParallel* ep) { ep_ = ep; }
  int64_t local_experts() const;

  // Routed slots per expert (int32 [E]) summed over the micro-batches since the last take_load():
  // this rank's tokens only; the balancing reduces it over the data-parallel group.
  Tensor& load() { return load_; }
  Param& bias() { return bias_; }

  // Per micro-batch state, kept in the owning layer's slot.
  struct State {
    Tensor h, residual;            // [N, d] input (post-attention norm) and the residual stream
    Tensor logits;                 // fp32 [N, E]
    Tensor expert_ids, weights;    // int32 [N, k], fp32 [N, k]
    Tensor counts;                 // int32 [E]: slots per expert of this micro-batch
    Tensor d_prob_sums;            // fp32 [B, E]: the balance loss's gradient (α > 0)
    Tensor offsets, row_of, slot_of;  // moe_permute_map: int32 [E + 1], [N, k], [N·k]
    Tensor rows;                   // [N·k, d] h permuted into expert order (the send side)
    // Expert side: x_e [R, d] the rows this rank's experts take (expert-major; undefined where only
    // its FP8 codes are made, permutes_with_cast), their offsets int32 [El + 1], the SwiGLU's input
    // and output and the experts' outputs.
    Tensor x_e, e_offsets, gu_e, act_e, out_e;
    Tensor rows_out;               // [N·k, d] the experts' outputs back in the send side's order
    Tensor s_gu, s_act;            // shared experts: [N, 2·Fs], [N, Fs]
    Tensor y;                      // [N, d] the output being built
    // Expert parallelism: the counts received, the exchange plan, the rows in flight.
    Tensor recv_counts;
    ExpertParallel::ExchangePlan plan;
    Tensor recv;                   // [R, d] source-major
    CommScheduler::Ticket ticket;
    // Backward: gradients kept from B for W, and the buffers the exchanges fill.
    Tensor d_y, d_rows, d_weights, d_out_e, d_gu_e, d_s_gu, d_logits, d_h;
    // Tensorwise FP8 (fp8_grouped::casts_ahead): x_e, act_e, d_out_e and d_gu_e cast once, both
    // layouts; the first GEMM of each reads the row codes and drops them, the weight gradient reads
    // the transposed ones (a byte an element while kept) and drops the rest. Blockwise likewise (their
    // 1×128 rows and 128×1 runs), where they are whole 1×128 groups wide.
    ops::Fp8GroupedCodes x_codes, act_codes, d_out_codes, d_gu_codes;
    // ... each cast taking the rows' amaxes (U32 [R]) that the op writing the tensor measured (under
    // expert parallelism the permutation of what arrived, x_e's and d_out_e's; SwiGLU act_e's and
    // d_gu_e's), consumed by the cast. Without the exchange x_e's and d_out_e's codes are gathered in
    // one pass each (ops::moe_permute_fp8_cast): x_e's from h, d_out_e's from dy times the routing
    // weights (the rows moe_unpermute_backward would write), their amaxes from the tokens' rows; x_e
    // and d_out_e themselves are never written (d_rows neither: the combine's backward makes the
    // weights' gradient alone).
    Tensor x_amax, act_amax, d_out_amax, d_gu_amax;
    // ... and the tokens' amaxes (U32 [N]) for those two gathered casts: h's rows' as the norm before
    // measured them, dy's as the layer above's norm backward did (GradCompanions::row_amax), each
    // undefined where not measured (the gathered cast then measures them itself).
    Tensor h_token_amax, dy_token_amax;
    // The shared experts' FP8 projections (models/fp8_linear.h): the transposes of h and s_act cast
    // in the forward where keep_fp8 (and of dy and d_s_gu in the input gradient) for W, and the
    // amaxes that the norm, SwiGLU and the layer above's norm backward measured for their casts.
    Fp8Saved s_gate_up_fp8, s_down_fp8;
    bool keep_fp8 = false;         // set by the block: the forward's FP8 state stays until B
    bool recomputing = false;      // the forward runs again for backward (no loads, no loss)
  };

  // ---- forward, in phases (each ends by issuing the exchange the next one waits for) ----
  // Where the post-attention norm leaves h's amax for the shared experts' tensorwise FP8 cast (null
  // where none is taken: no shared experts, a recipe that scales by groups, or s.keep_fp8 unset).
  Tensor* input_amax_slot(State& s, Device device) const;
  // Where the post-attention norm leaves h's rows' amaxes (U32 [N]) for the routed experts' gathered
  // cast (null where this pass does not permute with the cast).
  Tensor* input_row_amax_slot(const MicroBatchContext& ctx, State& s, int64_t N) const;
  // 0: router, balance loss, permutation; issues the counts exchange. h and residual [N, d].
  void forward_route(MicroBatchContext& ctx, State& s, const Tensor& h, const Tensor& residual);
  // 1: the exchange plan; issues the dispatch; the shared experts run meanwhile.
  void forward_dispatch(MicroBatchContext& ctx, State& s);
  // 2: the routed experts; issues the combine.
  void forward_experts(MicroBatchContext& ctx, State& s);
  // 3: y = residual + shared + routed (s.y, also returned).
  Tensor forward_combine(MicroBatchContext& ctx, State& s);
  // All four back to back (evaluation, recomputation).
  Tensor forward(MicroBatchContext& ctx, State& s, const Tensor& h, const Tensor& residual);

  // ---- backward of the input, in phases ----
  // 0: gradients of the combine and the shared experts; issues the combine's reverse exchange.
  // dy_amax (U32 [1] or undefined): dy's amax as the layer above's norm backward measured it, for the
  // shared down projection's cast (GradCompanions::amax); dy_row_amax (U32 [N] or undefined) its rows'
  // for the routed experts' gathered cast (GradCompanions::row_amax).
  void backward_combine(MicroBatchContext& ctx, State& s, const Tensor& dy, Tensor dy_amax = Tensor(),
                        Tensor dy_row_amax = Tensor());
  // 1: the routed experts' input gradient; issues the dispatch's reverse exchange.
  void backward_experts(MicroBatchContext& ctx, State& s);
  // 2: the gradient of h (s.d_h, also returned): permutation, router, shared experts together.
  Tensor backward_route(MicroBatchContext& ctx, State& s);
  // Weight gradients (accumulate over micro-batches; the routed experts' are stored by the step's
  // first write into their buffer, not zeroed for them: Param::grad_empty, grad_whole_writes).
  void backward_weight(State& s);
  // backward_weight as pieces that may run side by side (runtime/stream_fanout.h; the routed experts'
  // two grouped GEMMs, the shared experts' two, the router's), and what follows once all have run.
  std::vector<DevicePiece> weight_pieces(State& s);
  void weight_pieces_done(State& s);
  // Whether the router's and shared experts' weight gradients are this rank's work alone
  // (Linear::weight_grad_is_local; the routed experts' always are).
  bool weight_grads_are_local() const {
    return gate_.weight_grad_is_local() && shared_gate_up_.weight_grad_is_local() &&
           shared_down_.weight_grad_is_local();
  }
  // Drops what the forward keeps that the backward recomputes under Recompute::Mlp (the SwiGLU
  // hidden activations of the routed and the shared experts).
  void drop_hidden(State& s);

 private:
  bool exchanging() const { return ep_ && ep_->size() > 1; }
  // Whether this pass casts the expert rows ahead (State's codes): training under tensorwise FP8.
  bool casts_ahead(const MicroBatchContext& ctx) const;
  // Whether x_e and d_out_e are permuted and cast in one pass (ops::moe_permute_fp8_cast, in
  // forward_experts and backward_experts): casting ahead without the exchange, where x_e is h's rows
  // and d_out_e dy's times the routing weights.
  bool permutes_with_cast(const MicroBatchContext& ctx) const { return casts_ahead(ctx) && !exchanging(); }
  // The routed experts' rows R: x_e's, or N·k where only its codes exist (permutes_with_cast).
  int64_t expert_rows(const State& s) const;
  // Where the op writing a row tensor [rows, ·] leaves its rows' amaxes (`slot`), null where this pass
  // does not cast ahead.
  Tensor* row_amax_slot(const MicroBatchContext& ctx, Tensor& slot, int64_t rows) const;
  // x cast ahead as an activation (gradient false) or a gradient, taking the rows' amaxes its writer
  // left in `amax` (consumed either way); empty codes where this pass does not cast ahead (training
  // and fp8_grouped::casts_rows_ahead: tensorwise, and blockwise at whole 1×128 groups).
  ops::Fp8GroupedCodes cast_ahead(const MicroBatchContext& ctx, const Tensor& x, bool gradient, Tensor& amax,
                                  const Tensor& offsets) const;
  Tensor local_gate_up() const;  // [El, 2F, d] view of the working weights
  Tensor local_down() const;     // [El, d, F]
  void run_experts(MicroBatchContext& ctx, State& s);  // gu_e, act_e, out_e from x_e
  // s_gu, s_act from h; with `down_follows` (the forward, not a recomputation in backward) SwiGLU
  // measures s_act's amax for the shared down projection's cast.
  void run_shared(MicroBatchContext& ctx, State& s, bool down_follows);

  std::string prefix_;
  int block_ = 0;
  MoeShape shape_;
  Linear gate_;            // router [E, d]
  Param bias_;             // e_score_correction_bias [E], fp32 buffer
  Param gate_up_, down_;   // routed experts, expert-owned
  Fp8Recipe fp8_ = Fp8Recipe::None;  // the routed experts' GEMMs
  bool has_shared_ = false;
  Linear shared_gate_up_, shared_down_;
  ExpertParallel* ep_ = nullptr;
  Tensor load_;            // int32 [E], allocated at the first training forward
};

}  // namespace tetra
