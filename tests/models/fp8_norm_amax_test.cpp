// The norms that feed projections measure their output's amax for the projection's tensorwise FP8
// cast (ops::rmsnorm_forward / layernorm_forward's amax output, through Linear::fp8_amax_slot): a
// training forward that keeps its FP8 state casts q/k/v's and gate/up's (Llama) or c_attn's and
// c_fc's (GPT-2) inputs with the norm's amax; the evaluation forward and the first forward of a fully
// recomputed layer keep nothing and cast with the amax the cast measures itself. The amax is of the
// values as stored, so every path reads the same codes and scales: losses and gradients equal bit
// for bit across recompute none / mlp / full and the evaluation forward (CPU, fp32).
// In backward the norm backwards that write the residual stream's gradient measure its amax for the
// casts of the output gradients of the projections that wrote into the stream: the post-attention
// norm's for o_proj (attn.c_proj), the input norm of the block above (or the final norm) for
// down_proj (mlp.c_proj), handed over with the gradient (MicroBatchContext::offer_grad). A gradient
// that comes without it (from another pipeline stage) is cast with the cast's own amax: the same
// bits. The op profile shows the passes spared. A MoE block's shared experts take the same amaxes as
// a dense MLP (the post-attention norm's, SwiGLU's, the layer above's norm backward's) and keep their
// inputs' and output gradients' transposes for W, cast in the same passes.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "models/gpt_model.h"
#include "models/layer.h"
#include "models/llama_model.h"
#include "parallel/param_set.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "runtime/trace.h"

namespace tetra {
namespace {

struct BatchResult {
  double loss_sum = 0.0;
  std::vector<std::vector<float>> grads;  // every parameter's, in the model's order (training only)
  int64_t forward_amax_passes = 0;        // ops::fp8_amax calls in the forward (training only)
  int64_t backward_amax_passes = 0;       // ops::fp8_amax calls in backward: the casts' own amax passes
};

// The op profile's fp8_amax calls so far (runtime/trace.h).
int64_t amax_calls() {
  const auto& profile = Tracer::instance().op_profile();
  const auto it = profile.find("fp8_amax");
  return it == profile.end() ? 0 : it->second.calls;
}

// One batch of 2 × 16 random tokens through a freshly initialised model (the same weights for every
// call with the same config): forward, and with `training` backward. With `severed`, each layer's
// backward gets a copy of the gradient the layer above returned, as a pipeline stage receives it
// from another rank: nothing its producer offered with it (models/layer.h) reaches it.
template <class M, class Config>
BatchResult run_batch(Config cfg, Recompute recompute, bool training, bool severed = false) {
  cfg.recompute = recompute;
  M model(cfg);
  ParamSet params;
  params.build(model.params(), Device::cpu(), DType::F32, DType::F32);
  params.initialize(5);
  const int64_t B = 2, T = 16;
  Rng rng(9);
  std::vector<int32_t> ids(B * T), targets(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    ids[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.vocab_size)));
    targets[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.vocab_size)));
  }
  MicroBatchContext ctx(Device::cpu(), DType::F32);
  ctx.batch = B;
  ctx.seq_len = T;
  ctx.training = training;
  ctx.ids = Tensor::from_vector(ids, {B, T});
  ctx.targets = Tensor::from_vector(targets, {B, T});
  ctx.loss_grad_scale = 1.0f / static_cast<float>(B * T);
  params.zero_grads();
  std::vector<Layer*> layers = model.layers();
  Tracer& tracer = Tracer::instance();
  tracer.start(Device::cpu(), 0, "forward and backward");
  const int64_t calls_at_start = amax_calls();
  Tensor x = ctx.ids;
  for (Layer* l : layers) x = l->forward(ctx, x);
  BatchResult r;
  r.loss_sum = ops::sum_to_host(ctx.losses);
  tracer.end_step();  // resolves the forward's ops into the profile
  const int64_t calls_before = amax_calls();
  r.forward_amax_passes = calls_before - calls_at_start;
  if (!training) {
    tracer.stop();
    return r;
  }
  Tensor dy;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (severed && dy.defined()) {
      Tensor received = Tensor::empty(dy.shape(), dy.dtype());
      ops::copy(received, dy);
      dy = received;
    }
    dy = (*it)->backward_input(ctx, dy);
    (*it)->backward_weight(ctx);
  }
  tracer.end_step();
  tracer.stop();
  r.backward_amax_passes = amax_calls() - calls_before;
  for (Param* p : model.params())  // buffers (the router's bias) have no gradient
    if (p->grad.defined()) r.grads.emplace_back(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
  return r;
}

template <class M, class Config>
void expect_fused_amax_changes_nothing(const Config& cfg) {
  const BatchResult fused = run_batch<M>(cfg, Recompute::None, true);
  const BatchResult eval = run_batch<M>(cfg, Recompute::None, false);
  EXPECT_EQ(eval.loss_sum, fused.loss_sum) << "the evaluation forward (each cast measures its input)";
  for (Recompute r : {Recompute::Mlp, Recompute::Full}) {
    const BatchResult run = run_batch<M>(cfg, r, true);
    EXPECT_EQ(run.loss_sum, fused.loss_sum) << "recompute " << static_cast<int>(r);
    ASSERT_EQ(run.grads.size(), fused.grads.size());
    for (size_t i = 0; i < fused.grads.size(); ++i)
      EXPECT_EQ(run.grads[i], fused.grads[i]) << "recompute " << static_cast<int>(r) << ", param " << i;
  }
}

// The backward's hand-offs change no bit of the gradients, and spare the casts of o_proj's and
// down_proj's (attn.c_proj's and mlp.c_proj's; a MoE block's shared down projection's) output
// gradients their amax passes. What remains per block (ops::fp8_amax calls, tensorwise, no training
// step's weight copy in this harness): the four weights' casts for the input gradients, and q/k/v's
// (c_attn's) output gradient, which the attention backward writes without measuring it; the weight
// gradients cast nothing of their own (the transposes were kept). A severed stream costs each
// block's down_proj (mlp.c_proj, the shared experts' down_proj) a pass of its own again. The forward
// of each block measures the same five: the four weights and the attention's output.
// (The routed experts' grouped casts measure per expert inside ops::moe_grouped_fp8_cast.)
template <class M, class Config>
void expect_backward_hand_off(const Config& cfg) {
  constexpr int64_t kOwnPassesPerBlock = 5;
  const int64_t L = cfg.n_layers;
  const BatchResult fused = run_batch<M>(cfg, Recompute::None, true);
  const BatchResult severed = run_batch<M>(cfg, Recompute::None, true, /*severed=*/true);
  EXPECT_EQ(severed.loss_sum, fused.loss_sum);
  ASSERT_EQ(severed.grads.size(), fused.grads.size());
  for (size_t i = 0; i < fused.grads.size(); ++i) EXPECT_EQ(severed.grads[i], fused.grads[i]) << "param " << i;
  EXPECT_EQ(fused.forward_amax_passes, kOwnPassesPerBlock * L);
  EXPECT_EQ(fused.backward_amax_passes, kOwnPassesPerBlock * L);
  EXPECT_EQ(severed.backward_amax_passes, (kOwnPassesPerBlock + 1) * L);
  // Blockwise scales the gradients by 1×128 groups, which every cast measures itself: nothing handed.
  Config blockwise = cfg;
  blockwise.fp8 = Fp8Recipe::Blockwise;
  const BatchResult b = run_batch<M>(blockwise, Recompute::None, true);
  const BatchResult bs = run_batch<M>(blockwise, Recompute::None, true, /*severed=*/true);
  EXPECT_EQ(bs.loss_sum, b.loss_sum);
  for (size_t i = 0; i < b.grads.size(); ++i) EXPECT_EQ(bs.grads[i], b.grads[i]) << "blockwise, param " << i;
}

TEST(Fp8NormAmax, LlamaBackwardHandsTheNormsAmaxToTheStreamsProjections) {
  LlamaConfig cfg{.vocab_size = 96, .max_seq_len = 16, .d_model = 32, .n_layers = 3, .n_heads = 4, .ffn_dim = 48};
  cfg.fp8 = Fp8Recipe::Tensorwise;
  expect_backward_hand_off<LlamaModel>(cfg);
}

TEST(Fp8NormAmax, Gpt2BackwardHandsTheLayerNormsAmaxToTheStreamsProjections) {
  GptConfig cfg{.vocab_size = 96, .max_seq_len = 16, .d_model = 32, .n_layers = 3, .n_heads = 4};
  cfg.fp8 = Fp8Recipe::Tensorwise;
  expect_backward_hand_off<GptModel>(cfg);
}

// Llama with MoE blocks after a dense first one: 4 routed experts of width 16 (top 2), one shared.
LlamaConfig llama_moe_config() {
  LlamaConfig cfg{.vocab_size = 96, .max_seq_len = 16, .d_model = 32, .n_layers = 3, .n_heads = 4, .ffn_dim = 48};
  cfg.moe.n_experts = 4;
  cfg.moe.top_k = 2;
  cfg.moe.n_shared = 1;
  cfg.moe.ffn_dim = 16;
  cfg.moe.first_k_dense = 1;
  cfg.fp8 = Fp8Recipe::Tensorwise;
  return cfg;
}

TEST(Fp8NormAmax, LlamaMoeSharedExpertsTakeTheMeasuredAmaxAndKeepTheirTransposes) {
  expect_backward_hand_off<LlamaModel>(llama_moe_config());
}

TEST(Fp8NormAmax, LlamaMoeCastsWithTheMeasuredAmaxAsWithItsOwn) {
  expect_fused_amax_changes_nothing<LlamaModel>(llama_moe_config());
}

TEST(Fp8NormAmax, LlamaCastsWithTheNormsAmaxAsWithItsOwn) {
  LlamaConfig cfg{.vocab_size = 96, .max_seq_len = 16, .d_model = 32, .n_layers = 2, .n_heads = 4, .ffn_dim = 48};
  cfg.fp8 = Fp8Recipe::Tensorwise;
  expect_fused_amax_changes_nothing<LlamaModel>(cfg);
}

TEST(Fp8NormAmax, Gpt2CastsWithTheLayerNormsAmaxAsWithItsOwn) {
  GptConfig cfg{.vocab_size = 96, .max_seq_len = 16, .d_model = 32, .n_layers = 2, .n_heads = 4};
  cfg.fp8 = Fp8Recipe::Tensorwise;
  expect_fused_amax_changes_nothing<GptModel>(cfg);
}

}  // namespace
}  // namespace tetra
