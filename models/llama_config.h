// The shape of a Llama model (Hugging Face LlamaForCausalLM): no positions in the embedding,
// pre-RMSNorm blocks with rotary position embedding (rotate-half), grouped-query attention and a
// SwiGLU MLP, no biases anywhere, a final RMSNorm and an output layer, tied to the embedding or not.
// With `moe` enabled, the blocks after the first moe.first_k_dense replace their MLP by DeepSeek-V3's
// mixture of experts (Hugging Face DeepseekV3MoE: a sigmoid router with a balancing bias, routed
// SwiGLU experts, shared experts; models/llama_moe_block.h).
// The families built from the same blocks (model.arch; docs/models.md) switch features on:
// qwen2 (Qwen2ForCausalLM) adds biases to the q/k/v projections (o_proj has none); mistral
// (MistralForCausalLM) is Llama's layers with a sliding window that must cover the context; qwen3
// (Qwen3ForCausalLM) normalises q and k per head (RMSNorm over head_dim, one weight [D] for q and
// one for k) before RoPE, with a head_dim that need not be d_model / n_heads.
#pragma once
#include <cstdint>
#include <string>

#include "models/layer.h"
#include "models/model_args.h"
#include "runtime/rope.h"

namespace tetra {

struct LlamaConfig {
  std::string arch = "llama";  // llama, qwen2 or mistral: the Hugging Face model_type written and read
  int64_t vocab_size = 32000;
  int64_t max_seq_len = 2048;  // the longest context (RoPE has no table to size)
  int64_t d_model = 2048;
  int64_t n_layers = 16;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 0;      // 0 = n_heads
  int64_t explicit_head_dim = 0;  // model.head_dim (qwen3); 0 = d_model / n_heads
  int64_t ffn_dim = 0;         // 0 = default_ffn_dim(d_model)
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScalingArgs rope_scaling{};  // none: plain RoPE
  bool tie_embeddings = false;
  bool qkv_bias = false;        // biases on q_proj, k_proj and v_proj (qwen2)
  bool qk_norm = false;         // RMSNorm of each q and k head before RoPE (qwen3)
  int64_t sliding_window = 0;   // mistral: 0 = none; else at least max_seq_len (full attention)
  MoeArgs moe{};  // n_experts 0: every block dense
  Recompute recompute = Recompute::None;
  Fp8Recipe fp8 = Fp8Recipe::None;  // the blocks' projections (models/fp8_linear.h)

  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : d_model / n_heads; }
  Rope rope() const;  // theta and the scaling, as the rotary kernels take them
  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t ffn() const { return ffn_dim > 0 ? ffn_dim : default_ffn_dim(d_model); }
  int64_t qkv_rows() const { return (n_heads + 2 * kv_heads()) * head_dim(); }  // fused q | k | v
  // Under tensor parallelism over tp ranks (validate(tp) passed): the key/value heads of one rank,
  // Hkv/tp where tp divides them, else the one head its n_heads/tp query heads read (tp a multiple
  // of Hkv: each head replicated over tp/Hkv ranks, docs/tensor_parallel.md); the rank's q | k | v rows.
  int64_t kv_heads_per_rank(int64_t tp) const { return kv_heads() % tp == 0 ? kv_heads() / tp : 1; }
  int64_t qkv_rows_per_rank(int64_t tp) const { return (n_heads / tp + 2 * kv_heads_per_rank(tp)) * head_dim(); }
  // Meta's rule for Llama's MLP width without a multiplier: 2/3 of 4·d, rounded up to a multiple
  // of 256 (d 4096 → 11008).
  static int64_t default_ffn_dim(int64_t d_model);

  // Mixture of experts: whether block `i` (0-based) has the MoE MLP, the blocks that do, an expert's
  // SwiGLU width and the shared experts' (one SwiGLU of n_shared experts' width; 0 = none).
  bool moe_block(int64_t i) const { return moe.enabled() && i >= moe.first_k_dense; }
  int64_t moe_blocks() const { return moe.enabled() ? n_layers - moe.first_k_dense : 0; }
  int64_t expert_ffn() const { return moe.ffn_dim > 0 ? moe.ffn_dim : ffn(); }
  int64_t shared_ffn() const { return moe.n_shared * expert_ffn(); }

  int64_t attention_params() const;  // input norm, q/k/v/o (and the q/k/v biases, the q/k norms)
  int64_t block_params() const;      // one dense block: two norms, q/k/v/o, gate/up/down
  // One MoE block: two norms, q/k/v/o, the router's gate [E, d], E routed experts and the shared
  // experts; active: with top_k of the routed experts (what one token multiplies by). The router's
  // balancing bias is a buffer, not a parameter (as in Hugging Face), and is not counted.
  int64_t moe_block_params() const;
  int64_t moe_block_active_params() const;
  // Every parameter once (a tied output layer is the embedding); active: those one token uses.
  int64_t num_params() const;
  int64_t active_params() const;
  // Model FLOPs per token at context seq_len, as torchtitan counts them: 6·(N − embedding) +
  // 12·L·d·T, N − embedding being the blocks, the final norm and the output layer (which
  // multiplies whether or not it is tied, so a tied model counts its V·d here too). With MoE
  // blocks N counts their active parameters (ARCHITECTURE.md §7).
  double flops_per_token(int64_t seq_len) const;
  void validate(int tp = 1) const;  // → ModelArgsError naming the keys
  void validate_moe() const;        // the model.moe keys (called by validate when MoE is on)

  // The features of args.arch (qwen2: qkv_bias; qwen3: qk_norm) set, the shape copied.
  static LlamaConfig from(const ModelArgs& args);
  ModelArgs args() const;
};

}  // namespace tetra
