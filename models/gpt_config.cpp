#include "models/gpt_config.h"

#include "models/model_family.h"

namespace tetra {

int64_t GptConfig::num_params() const {
  const int64_t C = d_model, L = n_layers;
  const int64_t per_block = 2 * C /*ln_1*/ + 3 * C * C + 3 * C /*c_attn*/ + C * C + C /*attn c_proj*/ +
                            2 * C /*ln_2*/ + 4 * C * C + 4 * C /*c_fc*/ + 4 * C * C + C /*mlp c_proj*/;
  return vocab_size * C + max_seq_len * C + L * per_block + 2 * C;
}

double GptConfig::flops_per_token(int64_t seq_len) const {
  return 6.0 * static_cast<double>(num_params()) +
         12.0 * static_cast<double>(n_layers) * static_cast<double>(d_model) * static_cast<double>(seq_len);
}

void GptConfig::validate() const {
  if (arch != "gpt2") throw ModelArgsError({"model.arch"}, "'" + arch + "' is not gpt2 (a GPT-2 model was asked for)");
  validate_common_shape(args(), 1);
}

GptConfig GptConfig::from(const ModelArgs& a) {
  return {.arch = a.arch, .vocab_size = a.vocab_size, .max_seq_len = a.seq_len, .d_model = a.d_model,
          .n_layers = a.n_layers, .n_heads = a.n_heads, .ln_eps = static_cast<float>(a.ln_eps),
          .recompute = a.recompute, .fp8 = a.fp8};
}

ModelArgs GptConfig::args() const {
  return {.arch = arch, .vocab_size = vocab_size, .seq_len = max_seq_len, .d_model = d_model, .n_layers = n_layers,
          .n_heads = n_heads, .ln_eps = ln_eps, .tie_embeddings = true, .recompute = recompute, .fp8 = fp8};
}

}  // namespace tetra
