#include "models/gpt_family.h"

#include <algorithm>
#include <cstdio>

#include "models/gpt_model.h"

namespace tetra {

namespace {

class GptFamily : public ModelFamily {
 public:
  std::string arch() const override { return "gpt2"; }
  std::string description() const override {
    return "GPT-2: learned positions, pre-LayerNorm blocks, GELU-tanh MLP of 4·d_model, biases, tied embedding";
  }
  std::vector<std::string> config_keys() const override { return {"ln_eps"}; }

  void validate(const ModelArgs& args, int tp) const override {
    if (args.arch != arch()) throw ModelArgsError({"model.arch"}, "'" + args.arch + "' is not gpt2");
    validate_common_shape(args, tp);
    validate_fp8_widths(args, {{"model.d_model", args.d_model}});
  }

  std::unique_ptr<Model> build(const ModelArgs& args) const override {
    validate(args, 1);
    return std::make_unique<GptModel>(GptConfig::from(args));
  }

  ParamCount param_count(const ModelArgs& args) const override {
    const int64_t n = GptConfig::from(args).num_params();
    return {n, n};
  }

  double flops_per_token(const ModelArgs& args, int64_t seq_len) const override {
    return GptConfig::from(args).flops_per_token(seq_len);
  }

  // Per token and block, what a block keeps (models/gpt_block.cpp, Saved): x and x2 [C] at the
  // residual stream's width; ln_1, att, ln_2 [C], qkv [3C] and the MLP's fc_pre and fc_act [4C] each
  // at the working dtype's; the fp32 mean and rstd of both LayerNorms (16 B) and the fp32
  // log-sum-exp per head. The head keeps its input [C] (the stream's width) and ln_f [C], fp32
  // statistics and loss (12 B) and the [V] logits gradient.
  // Tensor parallelism (one of tp ranks): heads, qkv, att and the MLP's [4C] split over tp; with
  // sequence parallelism x, x2, ln_1, ln_2 and their statistics hold 1/tp of the tokens, plus the
  // gathered ln_1 and ln_2 [C] the column-parallel GEMMs read (kept for their weight gradients; under
  // tensorwise FP8 the codes of their transposes instead, a byte each, where the forward keeps them);
  // the head keeps its 1/tp rows, the gathered ln_f [C] and [V/tp] logits.
  std::vector<LayerCost> layer_costs(const ModelArgs& args, const ActivationShape& shape) const override {
    const double a = static_cast<double>(shape.value_bytes), r = static_cast<double>(shape.residual_bytes);
    const double C = static_cast<double>(args.d_model), H = static_cast<double>(args.n_heads);
    const double V = static_cast<double>(args.vocab_size), T = static_cast<double>(shape.seq_len);
    const double tokens = static_cast<double>(shape.micro_batch) * T;
    const double tp = std::max(1, shape.tp), rows = shape.sequence_parallel ? tp : 1.0;  // token split
    const double gathered = shape.sequence_parallel ? C * fp8_tp::sp_kept_input(args.fp8, a, true) +
                                                          C * fp8_tp::sp_kept_input(args.fp8, a, args.recompute == Recompute::None)
                                                    : 0.0;
    // Under train.fp8 the projections keep their inputs' FP8 transposes for W (Fp8Saved): ln_1 and att,
    // and ln_2 and fc_act [4C] where the MLP keeps its activations (not under recompute mlp).
    const double f8 = shape.tp > 1 ? 0.0 : fp8_kept_bytes_per_element(args.fp8);
    double block = (2.0 * C * a + 2.0 * C * r + 16.0) / rows + (12.0 * C * a + 4.0 * H) / tp + gathered +
                   f8 * C * (args.recompute == Recompute::None ? 7.0 : 2.0);
    if (args.recompute == Recompute::Mlp) block -= 8.0 * C * a / tp;
    if (args.recompute == Recompute::Full) block = C * r / rows;
    const int64_t c = args.d_model;
    std::vector<LayerCost> out;
    out.push_back({"embedding", (args.vocab_size + args.seq_len) * c, 0.0, 0.0});
    for (int64_t i = 0; i < args.n_layers; ++i)
      out.push_back({"h." + std::to_string(i), 12 * c * c + 13 * c, 2.0 * 12.0 * C * C + 4.0 * C * T, tokens * block});
    const double head = (C * r + C * a + 12.0) / rows + (shape.sequence_parallel ? C * a : 0.0) + V * a / tp;
    out.push_back({"head", 2 * c, 2.0 * V * C, tokens * head});
    return out;
  }

  // One block's backward: d_fc [4C], d_ln2 [C], d_qkv [3C] per token at the working width; the
  // stream gradients dx2, dx [C] at the residual stream's, and their working-dtype copies when the
  // widths differ. Tensor-parallel (the stream at the working width): the [4C] and [3C] split, the
  // [C] on 1/tp of the tokens with sequence parallelism, plus the two gathered output gradients [C].
  double backward_working_bytes(const ModelArgs& args, const ActivationShape& shape) const override {
    const double tokens = static_cast<double>(shape.micro_batch) * static_cast<double>(shape.seq_len);
    const double a = static_cast<double>(shape.value_bytes), r = static_cast<double>(shape.residual_bytes);
    const double C = static_cast<double>(args.d_model);
    const double tp = std::max(1, shape.tp), rows = shape.sequence_parallel ? tp : 1.0;
    if (tp <= 1) return tokens * C * (8.0 * a + 2.0 * r + (shape.rounded_stream_gradient() ? 2.0 * a : 0.0));
    return tokens * a * (3.0 * C / rows + 8.0 * C / tp + (shape.sequence_parallel ? 2.0 * C : 0.0));
  }

  // Megatron-LM's GPT split with sequence parallelism: c_attn and c_fc column-parallel (c_attn per
  // head of each of q, k, v), the two c_proj row-parallel into a sequence-sharded residual stream;
  // the tied wte split by vocabulary for the lookup and the LM head alike.
  TensorParallelPlan tensor_parallel_plan(const ModelArgs& args) const override {
    TensorParallelPlan plan;
    auto add = [&](const std::string& name, TpStyle s) { plan.params.push_back({name, s}); };
    add("transformer.wte.weight", TpStyle::VocabParallelEmbedding);
    add("transformer.wpe.weight", TpStyle::SequenceParallel);
    plan.layers.push_back({"embedding", TpLayout::Replicated, TpLayout::SequenceShard});
    for (int64_t i = 0; i < args.n_layers; ++i) {
      const std::string p = "transformer.h." + std::to_string(i) + ".";
      for (const char* ln : {"ln_1", "ln_2"}) {
        add(p + ln + ".weight", TpStyle::SequenceParallel);
        add(p + ln + ".bias", TpStyle::SequenceParallel);
      }
      for (const char* col : {"attn.c_attn", "mlp.c_fc"}) {
        add(p + col + ".weight", TpStyle::ColumnParallel);
        add(p + col + ".bias", TpStyle::ColumnParallel);
      }
      for (const char* row : {"attn.c_proj", "mlp.c_proj"}) {
        add(p + row + ".weight", TpStyle::RowParallel);
        add(p + row + ".bias", TpStyle::SequenceParallel);
      }
      plan.layers.push_back({"h." + std::to_string(i), TpLayout::SequenceShard, TpLayout::SequenceShard});
    }
    add("transformer.ln_f.weight", TpStyle::SequenceParallel);
    add("transformer.ln_f.bias", TpStyle::SequenceParallel);
    plan.layers.push_back({"head", TpLayout::SequenceShard, TpLayout::VocabShard});
    return plan;
  }

  std::string describe(const ModelArgs& args) const override {
    char buf[160];
    std::snprintf(buf, sizeof buf, "gpt2: %lld layers, d_model %lld, %lld heads, vocabulary %lld, context %lld",
                  static_cast<long long>(args.n_layers), static_cast<long long>(args.d_model),
                  static_cast<long long>(args.n_heads), static_cast<long long>(args.vocab_size),
                  static_cast<long long>(args.seq_len));
    return buf;
  }
};

}  // namespace

const ModelFamily& gpt_family() {
  static const GptFamily family;
  return family;
}

}  // namespace tetra
