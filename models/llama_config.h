// The shape of a Llama model (Hugging Face LlamaForCausalLM): no positions in the embedding,
// pre-RMSNorm blocks with rotary position embedding (rotate-half), grouped-query attention and a
// SwiGLU MLP, no biases anywhere, a final RMSNorm and an output layer, tied to the embedding or not.
#pragma once
#include <cstdint>

#include "models/layer.h"
#include "models/model_args.h"

namespace tetra {

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t max_seq_len = 2048;  // the longest context (RoPE has no table to size)
  int64_t d_model = 2048;
  int64_t n_layers = 16;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 0;      // 0 = n_heads
  int64_t ffn_dim = 0;         // 0 = default_ffn_dim(d_model)
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool tie_embeddings = false;
  Recompute recompute = Recompute::None;

  int64_t head_dim() const { return d_model / n_heads; }
  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t ffn() const { return ffn_dim > 0 ? ffn_dim : default_ffn_dim(d_model); }
  int64_t qkv_rows() const { return (n_heads + 2 * kv_heads()) * head_dim(); }  // fused q | k | v
  // Meta's rule for Llama's MLP width without a multiplier: 2/3 of 4·d, rounded up to a multiple
  // of 256 (d 4096 → 11008).
  static int64_t default_ffn_dim(int64_t d_model);

  int64_t block_params() const;  // one block: two norms, q/k/v/o, gate/up/down
  // Every parameter once (a tied output layer is the embedding).
  int64_t num_params() const;
  // Model FLOPs per token at context seq_len, as torchtitan counts them: 6·(N − embedding) +
  // 12·L·d·T, N − embedding being the blocks, the final norm and the output layer (which
  // multiplies whether or not it is tied, so a tied model counts its V·d here too).
  double flops_per_token(int64_t seq_len) const;
  void validate(int tp = 1) const;  // → ModelArgsError naming the keys

  static LlamaConfig from(const ModelArgs& args);
  ModelArgs args() const;
};

}  // namespace tetra
