// The shape of a GPT model (GPT-2 flavour: learned positions, pre-LayerNorm, GELU-tanh MLP of 4·d,
// tied embedding and LM head, no dropout).
#pragma once
#include <cstdint>
#include <string>

#include "models/layer.h"
#include "models/model_args.h"

namespace tetra {

struct GptConfig {
  std::string arch = "gpt2";
  int64_t vocab_size = 50304;
  int64_t max_seq_len = 1024;  // rows of the position table
  int64_t d_model = 768;
  int64_t n_layers = 12;
  int64_t n_heads = 12;
  float ln_eps = 1e-5f;
  Recompute recompute = Recompute::None;
  Fp8Recipe fp8 = Fp8Recipe::None;  // the blocks' projections (models/fp8_linear.h)

  int64_t head_dim() const { return d_model / n_heads; }
  // Parameters, tied embedding counted once.
  int64_t num_params() const;
  // Model FLOPs per token for training at context seq_len: 6·N + 12·L·d·T (ARCHITECTURE.md §7).
  double flops_per_token(int64_t seq_len) const;
  void validate() const;  // shapes that cannot work (d_model % n_heads, ...) → ModelArgsError

  static GptConfig from(const ModelArgs& args);
  ModelArgs args() const;
};

}  // namespace tetra
