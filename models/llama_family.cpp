#include "models/llama_family.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "models/fp8_grouped.h"
#include "models/llama_model.h"

namespace tetra {

namespace {

// One class for Llama and the families built from its blocks (LlamaConfig::from switches their
// features by arch): the arch, its one-line description and the model.* keys it reads.
class LlamaFamily : public ModelFamily {
 public:
  LlamaFamily(std::string arch, std::string description, std::vector<std::string> keys)
      : arch_(std::move(arch)), description_(std::move(description)), keys_(std::move(keys)) {}
  std::string arch() const override { return arch_; }
  std::string description() const override { return description_; }
  std::vector<std::string> config_keys() const override { return keys_; }

  void validate(const ModelArgs& args, int tp) const override {
    if (args.arch != arch()) throw ModelArgsError({"model.arch"}, "'" + args.arch + "' is not " + arch());
    LlamaConfig::from(args).validate(tp);
  }

  std::unique_ptr<Model> build(const ModelArgs& args) const override {
    validate(args, 1);
    return std::make_unique<LlamaModel>(LlamaConfig::from(args));
  }

  ParamCount param_count(const ModelArgs& args) const override {
    const LlamaConfig c = LlamaConfig::from(args);
    return {c.num_params(), c.active_params()};
  }

  double flops_per_token(const ModelArgs& args, int64_t seq_len) const override {
    return LlamaConfig::from(args).flops_per_token(seq_len);
  }

  // Per token and block, what a block keeps (models/llama_block.cpp, Saved): x and x2 [C] at the
  // residual stream's width; h1, h2 [C], att [H·D], qkv [(H + 2·Hkv)·D], gate_up [2F] and act [F] at the
  // working dtype's; the fp32 rstd of both norms (8 B) and the fp32 log-sum-exp per head. The head
  // keeps its input [C] (the stream's width) and the normed input [C], fp32 rstd and loss (8 B) and
  // the [V] logits gradient.
  std::vector<LayerCost> layer_costs(const ModelArgs& args, const ActivationShape& shape) const override {
    const LlamaConfig c = LlamaConfig::from(args);
    const double a = static_cast<double>(shape.value_bytes), r = static_cast<double>(shape.residual_bytes);
    const double C = static_cast<double>(c.d_model), H = static_cast<double>(c.n_heads);
    const double Q = static_cast<double>(c.qkv_rows()), F = static_cast<double>(c.ffn());
    const double V = static_cast<double>(c.vocab_size), T = static_cast<double>(shape.seq_len);
    const double tokens = static_cast<double>(shape.micro_batch) * T;
    // Tensor parallelism (one of tp ranks): heads and the MLP split over tp; with sequence
    // parallelism x, h1, x2, h2 and the rstds on 1/tp of the tokens, plus the gathered h1 and h2 (under
    // tensorwise FP8 the codes of their transposes, a byte each, where the forward keeps them).
    // qkv holds this rank's q | k | v rows (replicated key/value heads in full, LlamaConfig::qkv_rows_per_rank).
    const double tp = std::max(1, shape.tp), rows = shape.sequence_parallel ? tp : 1.0;
    const double gathered = shape.sequence_parallel ? C * fp8_tp::sp_kept_input(c.fp8, a, true) +
                                                          C * fp8_tp::sp_kept_input(c.fp8, a, c.recompute == Recompute::None)
                                                    : 0.0;
    const double Qr = static_cast<double>(c.qkv_rows_per_rank(std::max(1, shape.tp)));
    // att is [H·D] (C unless model.head_dim says otherwise); qwen3 also keeps q and k before their
    // norms [(H + Hkv)·D] and their fp32 rstd per head.
    const double HD = static_cast<double>(c.n_heads * c.head_dim());
    const double qk = c.qk_norm ? static_cast<double>((c.n_heads + c.kv_heads()) * c.head_dim()) * a +
                                      4.0 * static_cast<double>(c.n_heads + c.kv_heads())
                                : 0.0;
    // Under train.fp8 the projections keep their inputs' FP8 transposes for W (Fp8Saved): h1 and att,
    // and h2 and act where the MLP keeps its activations (not under recompute mlp).
    const double f8 = shape.tp > 1 ? 0.0 : fp8_kept_bytes_per_element(c.fp8);
    double block = (2.0 * C * a + 2.0 * C * r + 8.0) / rows + ((HD + 3.0 * F) * a + 4.0 * H + qk) / tp + Qr * a +
                   gathered + f8 * (C + HD + (c.recompute == Recompute::None ? C + F : 0.0));
    if (c.recompute == Recompute::Mlp) block -= 3.0 * F * a / tp;
    if (c.recompute == Recompute::Full) block = C * r / rows;
    const double block_flops = 2.0 * static_cast<double>(c.block_params() - 2 * c.d_model) + 4.0 * C * T;
    // A MoE block keeps the attention half and h2 as a dense one, the router's fp32 logits [E] and
    // per slot (k per token) the expert's input [C] and output [C] rows, its SwiGLU input [2F] and
    // output [F], the id, weight and row index (12 B); the shared experts' [2Fs] and [Fs]. Its FLOPs
    // count the active parameters' products: the gate, k experts, the shared experts.
    const double E = static_cast<double>(c.moe.n_experts), k = static_cast<double>(c.moe.top_k);
    const double Fe = static_cast<double>(c.expert_ffn()), Fs = static_cast<double>(c.shared_ffn());
    // Under tensorwise (and blockwise where they are whole 1×128 groups wide) the routed experts keep
    // the transposed codes of their inputs x [C] and act [Fe] per slot for W (MoeMlp::State, a byte
    // each; act's dropped under recompute mlp); the shared experts those of h [C] and s_act [Fs] as a
    // dense MLP does (not under recompute mlp). Under tensorwise without expert parallelism x's codes
    // are gathered from h and x itself is not kept, but the slots' int32 index into h is
    // (MoeMlp::permutes_with_cast).
    const double g8 = fp8_grouped::casts_ahead(c.fp8) ? 1.0 : 0.0;
    const double x8 = fp8_grouped::casts_rows_ahead(c.fp8, c.d_model) ? C : 0.0;
    const double act8 = fp8_grouped::casts_rows_ahead(c.fp8, c.expert_ffn()) ? Fe : 0.0;
    const bool x_gathered = g8 > 0.0 && shape.ep <= 1;
    const double shared8 = Fs > 0 && c.recompute == Recompute::None ? f8 * (C + Fs) : 0.0;
    const double x_rows = x_gathered ? 0.0 : C;
    double moe_block = (3.0 * C + Q + k * (x_rows + C + 3.0 * Fe) + 3.0 * Fs) * a + 2.0 * C * r + 4.0 * E +
                       (x_gathered ? 16.0 : 12.0) * k + 8.0 + 4.0 * H + f8 * (C + HD) + k * (x8 + act8) + shared8;
    if (c.recompute == Recompute::Mlp) moe_block -= (3.0 * k * Fe + 3.0 * Fs) * a + k * act8;
    if (c.recompute == Recompute::Full) moe_block = C * r;
    const double moe_flops = 2.0 * static_cast<double>(c.moe_block_active_params() - 2 * c.d_model) + 4.0 * C * T;
    std::vector<LayerCost> out;
    out.push_back({"embedding", c.vocab_size * c.d_model, 0.0, 0.0});
    for (int64_t i = 0; i < c.n_layers; ++i) {
      if (c.moe_block(i))
        out.push_back({"layers." + std::to_string(i), c.moe_block_params(), moe_flops, tokens * moe_block});
      else
        out.push_back({"layers." + std::to_string(i), c.block_params(), block_flops, tokens * block});
    }
    const double head = (C * a + C * r + 8.0) / rows + (shape.sequence_parallel ? C * a : 0.0) + V * a / tp;
    out.push_back({"head", c.d_model + (c.tie_embeddings ? 0 : c.vocab_size * c.d_model), 2.0 * V * C,
                   tokens * head});
    return out;
  }

  // One dense block's backward: d_act [F], d_gate_up [2F], d_h2 [C], d_qkv [(H + 2·Hkv)·D] at the
  // working width; the stream gradients dx2, dx [C] at the residual stream's, and their working-dtype
  // copies when the widths differ. A MoE block's (its stream always of the working dtype): per slot
  // the rows' gradients [C] twice (once where d_out's codes are gathered from dy) and the experts'
  // d_act [F], d_gu [2F]; d_logits [E]; the shared
  // experts' [3Fs]; d_h2, dx2, dx, d_att [C], d_qkv.
  double backward_working_bytes(const ModelArgs& args, const ActivationShape& shape) const override {
    const LlamaConfig c = LlamaConfig::from(args);
    const double tokens = static_cast<double>(shape.micro_batch) * static_cast<double>(shape.seq_len);
    const double a = static_cast<double>(shape.value_bytes), r = static_cast<double>(shape.residual_bytes);
    const double C = static_cast<double>(c.d_model);
    const double tp = std::max(1, shape.tp), rows = shape.sequence_parallel ? tp : 1.0;
    // Tensor-parallel (the stream at the working width): the [F]- and qkv-wide gradients split, the
    // [C] ones on 1/tp of the tokens with sequence parallelism, plus the two gathered output
    // gradients. MoE blocks run at tp 1 (launch/config/validate.cpp refuses tp > 1 with model.moe).
    double per_token = tp <= 1 ? a * static_cast<double>(3 * c.ffn() + c.d_model + c.qkv_rows()) + 2.0 * C * r +
                                     (shape.rounded_stream_gradient() ? 2.0 * C * a : 0.0)
                               : a * (static_cast<double>(3 * c.ffn()) / tp +
                                      static_cast<double>(c.qkv_rows_per_rank(shape.tp)) + 3.0 * C / rows +
                                      (shape.sequence_parallel ? 2.0 * C : 0.0));
    if (c.moe_blocks() > 0) {
      // Tensorwise without expert parallelism gathers d_out's codes from dy (MoeMlp::permutes_with_cast):
      // one row gradient per slot, not two.
      const int64_t row_grads = fp8_grouped::casts_ahead(c.fp8) && shape.ep <= 1 ? 1 : 2;
      const double moe = static_cast<double>(c.moe.top_k * (row_grads * c.d_model + 3 * c.expert_ffn()) +
                                             c.moe.n_experts + 3 * c.shared_ffn() + 4 * c.d_model + c.qkv_rows());
      // Tensorwise, and blockwise where they are whole 1×128 groups wide: the codes of d_out [C] and
      // d_gu [2Fe] per slot, both layouts while the input gradients run (a byte an element each), the
      // transposed ones kept for W; under any recipe the shared experts' dyᵀ [C] and d_s_guᵀ [2Fs],
      // kept from B to W.
      auto coded = [&](int64_t cols) {
        return fp8_grouped::casts_rows_ahead(c.fp8, cols) ? 2.0 * static_cast<double>(c.moe.top_k * cols) : 0.0;
      };
      const double codes = coded(c.d_model) + coded(2 * c.expert_ffn()) +
                           (c.shared_ffn() > 0 ? fp8_kept_bytes_per_element(c.fp8) *
                                                     static_cast<double>(c.d_model + 2 * c.shared_ffn())
                                               : 0.0);
      per_token = std::max(per_token, a * moe + codes);
    }
    return tokens * per_token;
  }

  // torchtitan's Llama plan with sequence parallelism: the embedding split by vocabulary, norms on
  // sequence shards, qkv and gate_up column-parallel (per head of q, k and v; per half of gate and
  // up), o_proj and down_proj row-parallel, the output layer split by vocabulary (loss parallel).
  TensorParallelPlan tensor_parallel_plan(const ModelArgs& args) const override {
    TensorParallelPlan plan;
    auto add = [&](const std::string& name, TpStyle s) { plan.params.push_back({name, s}); };
    add("model.embed_tokens.weight", TpStyle::VocabParallelEmbedding);
    plan.layers.push_back({"embedding", TpLayout::Replicated, TpLayout::SequenceShard});
    for (int64_t i = 0; i < args.n_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      add(p + "input_layernorm.weight", TpStyle::SequenceParallel);
      // Key/value heads split like the query heads, or, with tp a multiple of n_kv_heads, replicated
      // over the tp / n_kv_heads ranks whose query heads read them (Megatron-LM's way).
      plan.params.push_back({p + "self_attn.qkv_proj.weight", TpStyle::ColumnParallel, /*replicate_parts=*/true});
      if (LlamaConfig::from(args).qkv_bias)  // split with its rows, per head of q, k and v
        plan.params.push_back({p + "self_attn.qkv_proj.bias", TpStyle::ColumnParallel, /*replicate_parts=*/true});
      if (LlamaConfig::from(args).qk_norm)  // whole on every rank, applied to its heads
        for (const char* n : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}) add(p + n, TpStyle::PerHead);
      add(p + "self_attn.o_proj.weight", TpStyle::RowParallel);
      add(p + "post_attention_layernorm.weight", TpStyle::SequenceParallel);
      if (LlamaConfig::from(args).moe_block(i)) {
        // The MoE MLP runs on the sequence shard of each tp rank, its weights whole on every tp rank
        // (experts are split by expert parallelism instead, as DeepSeek-V3 trains them).
        for (const char* n : {"mlp.gate.weight", "mlp.gate.e_score_correction_bias", "mlp.experts.gate_up_proj.weight",
                              "mlp.experts.down_proj.weight"})
          add(p + n, TpStyle::SequenceParallel);
        if (args.moe.n_shared > 0)
          for (const char* n : {"mlp.shared_experts.gate_up_proj.weight", "mlp.shared_experts.down_proj.weight"})
            add(p + n, TpStyle::SequenceParallel);
      } else {
        add(p + "mlp.gate_up_proj.weight", TpStyle::ColumnParallel);
        add(p + "mlp.down_proj.weight", TpStyle::RowParallel);
      }
      plan.layers.push_back({"layers." + std::to_string(i), TpLayout::SequenceShard, TpLayout::SequenceShard});
    }
    add("model.norm.weight", TpStyle::SequenceParallel);
    if (!args.tie_embeddings) add("lm_head.weight", TpStyle::VocabParallelOutput);
    plan.layers.push_back({"head", TpLayout::SequenceShard, TpLayout::VocabShard});
    return plan;
  }

  std::string describe(const ModelArgs& args) const override {
    const LlamaConfig c = LlamaConfig::from(args);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s: %lld layers, d_model %lld, %lld heads (%lld key/value), ffn %lld, vocabulary %lld, "
                  "rope_theta %g, %s output layer, context %lld",
                  c.arch.c_str(), static_cast<long long>(c.n_layers), static_cast<long long>(c.d_model),
                  static_cast<long long>(c.n_heads), static_cast<long long>(c.kv_heads()),
                  static_cast<long long>(c.ffn()), static_cast<long long>(c.vocab_size),
                  static_cast<double>(c.rope_theta), c.tie_embeddings ? "tied" : "untied",
                  static_cast<long long>(c.max_seq_len));
    std::string line = buf;
    if (c.qkv_bias) line += ", q/k/v biases";
    if (c.qk_norm) line += ", q/k norms, head_dim " + std::to_string(c.head_dim());
    if (c.sliding_window > 0) line += ", sliding window " + std::to_string(c.sliding_window) + " (full attention)";
    if (c.rope_scaling.type != "none") {
      std::snprintf(buf, sizeof buf, "; rope scaling %s, factor %g", c.rope_scaling.type.c_str(), c.rope_scaling.factor);
      line += buf;
    }
    if (c.moe.enabled()) {
      std::snprintf(buf, sizeof buf,
                    "; MoE in layers %lld..%lld: %lld routed experts of ffn %lld, top %lld%s, %lld shared, route "
                    "scale %g; %.3gB parameters, %.3gB active",
                    static_cast<long long>(c.moe.first_k_dense), static_cast<long long>(c.n_layers - 1),
                    static_cast<long long>(c.moe.n_experts), static_cast<long long>(c.expert_ffn()),
                    static_cast<long long>(c.moe.top_k),
                    c.moe.n_group > 1 ? (" of " + std::to_string(c.moe.topk_group) + "/" +
                                         std::to_string(c.moe.n_group) + " groups").c_str()
                                      : "",
                    static_cast<long long>(c.moe.n_shared), c.moe.route_scale, c.num_params() / 1e9,
                    c.active_params() / 1e9);
      line += buf;
      if (c.moe.force_balance) line += " (routing forced to balance: a benchmark, not training)";
    }
    return line;
  }

 private:
  std::string arch_, description_;
  std::vector<std::string> keys_;
};

// The keys of every family built from Llama's dense blocks.
std::vector<std::string> dense_keys() {
  return {"n_kv_heads",
          "ffn_dim",
          "norm_eps",
          "rope_theta",
          "rope_scaling.type",
          "rope_scaling.factor",
          "rope_scaling.low_freq_factor",
          "rope_scaling.high_freq_factor",
          "rope_scaling.original_max_position_embeddings",
          "tie_embeddings"};
}

}  // namespace

const ModelFamily& llama_family() {
  static const LlamaFamily family(
      "llama",
      "Llama: RMSNorm, rotary embedding, grouped-query attention, SwiGLU MLP, no biases, output layer tied or not; "
      "with model.moe, DeepSeek-V3 mixture-of-experts MLPs",
      [] {
        std::vector<std::string> k = dense_keys();
        for (const char* m : {"n_experts", "top_k", "n_shared", "ffn_dim", "first_k_dense", "route_scale", "n_group",
                              "topk_group", "bias_update_rate", "aux_loss_coef", "force_balance"})
          k.push_back(std::string("moe.") + m);
        return k;
      }());
  return family;
}

const ModelFamily& qwen2_family() {
  static const LlamaFamily family("qwen2", "Qwen2 / Qwen2.5: Llama's layers with biases on the q/k/v projections",
                                  dense_keys());
  return family;
}

const ModelFamily& qwen3_family() {
  static const LlamaFamily family(
      "qwen3", "Qwen3: Llama's layers with an RMSNorm on each q and k head before RoPE, head_dim of its own", [] {
        std::vector<std::string> k = dense_keys();
        k.push_back("head_dim");
        return k;
      }());
  return family;
}

const ModelFamily& mistral_family() {
  static const LlamaFamily family(
      "mistral", "Mistral: Llama's layers; a sliding window of at least model.seq_len (full attention)", [] {
        std::vector<std::string> k = dense_keys();
        k.push_back("sliding_window");
        return k;
      }());
  return family;
}

}  // namespace tetra
