// ModelArgs: the network a config describes, as models/ sees it (launch/ converts its Config into
// one; models/ cannot see launch/). One flat struct for every family: each family reads the fields
// it takes (ModelFamily::config_keys) and ignores the rest. Field names are the `model.*` config
// keys, so errors can name the key to fix.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/fp8_linear.h"
#include "models/layer.h"
#include "runtime/error.h"

namespace tetra {

// model.moe: DeepSeek-style mixture-of-experts MLPs (docs/models.md "Mixture of experts"); n_experts
// 0 = a dense model. Field names are the config keys under model.moe.
struct MoeArgs {
  int64_t n_experts = 0;        // routed experts per MoE layer (E)
  int64_t top_k = 2;            // experts per token (k)
  int64_t n_shared = 0;         // shared experts: one SwiGLU of width n_shared·ffn_dim
  int64_t ffn_dim = 0;          // an expert's SwiGLU width; 0 = the dense MLP width
  int64_t first_k_dense = 0;    // leading blocks that keep the dense MLP
  double route_scale = 1.0;     // routed_scaling_factor
  int64_t n_group = 1;          // group-limited routing: expert groups (1 = none) ...
  int64_t topk_group = 1;       // ... and how many a token may choose from
  double bias_update_rate = 1e-3;  // auxiliary-loss-free balancing step; 0 = off
  double aux_loss_coef = 0;     // α of the sequence-wise balance loss; 0 = off
  bool force_balance = false;   // benchmarks only: token t to experts (t·k + j) mod E
  bool enabled() const { return n_experts > 0; }
};

// model.rope_scaling: the rotary frequencies rescaled for a longer context, as Hugging Face's
// rope_scaling (runtime/rope.h has the formulas; docs/models.md). type none = plain RoPE; the other
// keys are Hugging Face's and 0 means not set (a type that needs one says so).
struct RopeScalingArgs {
  std::string type = "none";    // none | linear | llama3
  double factor = 0;            // linear, llama3: e.g. 32
  double low_freq_factor = 0;   // llama3: e.g. 1
  double high_freq_factor = 0;  // llama3: e.g. 4
  int64_t original_max_position_embeddings = 0;  // llama3: the pretraining context, e.g. 8192
  bool operator==(const RopeScalingArgs&) const = default;
};

struct ModelArgs {
  std::string arch = "gpt2";  // model.arch: the family
  int64_t vocab_size = 0;
  int64_t seq_len = 0;        // model.seq_len: the longest context (GPT-2: rows of the position table)
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;     // key/value heads; 0 = n_heads (plain multi-head attention)
  int64_t head_dim = 0;       // channels per attention head (Qwen3); 0 = d_model / n_heads
  int64_t ffn_dim = 0;        // MLP hidden width; 0 = the family's default
  double ln_eps = 1e-5;       // LayerNorm epsilon (GPT-2)
  double norm_eps = 1e-5;     // RMSNorm epsilon (Llama)
  double rope_theta = 10000;  // rotary embedding base (Llama)
  bool tie_embeddings = false;  // output layer shares the token embedding (Llama; GPT-2 always ties)
  RopeScalingArgs rope_scaling{};  // Llama: rotary frequencies for a longer context
  // Mistral's sliding-window attention: each token sees the last sliding_window positions; 0 = none.
  // A window of at least seq_len is full causal attention; a shorter one is refused (docs/models.md).
  int64_t sliding_window = 0;
  MoeArgs moe{};                // Llama: mixture-of-experts MLPs
  Recompute recompute = Recompute::None;  // train.recompute, applied to every block
  Fp8Recipe fp8 = Fp8Recipe::None;        // train.fp8.recipe: the blocks' projections in FP8
};

// What one micro-batch of training looks like, for activation memory: sequences × tokens at the
// working dtype's width, the residual stream (the hidden states between blocks and their
// gradients) at its own, under the recompute mode of ModelArgs, on one tensor-parallel rank.
struct ActivationShape {
  int64_t micro_batch = 1;
  int64_t seq_len = 0;
  int64_t value_bytes = 4;     // 4 (fp32 on the CPU) or 2 (bf16 on CUDA)
  int64_t residual_bytes = 4;  // 4 (fp32: the CPU, or train.residual_dtype fp32) or 2 (bf16)
  // The residual stream's gradient is also kept rounded to the working dtype, for the GEMMs that
  // read it (docs/kernels.md "Residual stream precision"), when the two widths differ.
  bool rounded_stream_gradient() const { return residual_bytes != value_bytes; }
  // Tensor parallelism: the activations of one of tp ranks (heads and MLP widths split; with
  // sequence parallelism the residual stream and norms on 1/tp of the tokens). tp > 1 runs with
  // the residual stream at the working width (launch/config/validate.cpp).
  int tp = 1;
  bool sequence_parallel = false;
  // Expert parallelism: ep > 1 exchanges the routed experts' rows between ranks.
  int ep = 1;
};

// A model shape a family cannot build, or cannot split over the mesh: the config keys involved
// (`model.n_kv_heads`, ...; the first is the one to fix) and what is wrong and what would be valid.
// launch/ turns it into "FILE:LINE: KEY: WHAT [OTHER at FILE:LINE]"; what() alone reads
// "KEY: WHAT" for callers outside launch/.
class ModelArgsError : public Error {
 public:
  ModelArgsError(std::vector<std::string> keys, const std::string& what)
      : Error(ErrorKind::Config, (keys.empty() ? std::string() : keys.front() + ": ") + what),
        keys_(std::move(keys)),
        detail_(what) {}
  const std::vector<std::string>& keys() const { return keys_; }
  const std::string& detail() const { return detail_; }

 private:
  std::vector<std::string> keys_;
  std::string detail_;
};

}  // namespace tetra
