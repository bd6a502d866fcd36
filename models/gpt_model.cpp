#include "models/gpt_model.h"

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
  if (arch != "gpt2") TETRA_FAIL(Config, "model.arch: '", arch, "' is not supported yet (valid: gpt2)");
  if (vocab_size < 2) TETRA_FAIL(Config, "model.vocab_size must be ≥ 2, got ", vocab_size);
  if (d_model < 1 || n_layers < 1 || n_heads < 1 || max_seq_len < 1)
    TETRA_FAIL(Config, "model: d_model, n_layers, n_heads and seq_len must be positive");
  if (d_model % n_heads != 0)
    TETRA_FAIL(Config, "model.d_model (", d_model, ") must be divisible by model.n_heads (", n_heads, ")");
}

GptModel::GptModel(const GptConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  wte_.name = "transformer.wte.weight";
  wte_.full_shape = wte_.local_shape = {cfg.vocab_size, cfg.d_model};
  wte_.init_std = 0.02f;
  wte_.layer_index = 0;
  embedding_ = std::make_unique<GptEmbedding>(cfg_, &wte_);
  embedding_->set_index(0);
  for (int i = 0; i < cfg.n_layers; ++i) {
    blocks_.push_back(std::make_unique<GptBlock>(cfg_, i));
    blocks_.back()->set_index(i + 1);
    blocks_.back()->set_recompute(cfg.recompute);
  }
  const int head_index = static_cast<int>(cfg.n_layers) + 1;
  wte_.tied_layers = {head_index};  // the head's LM projection reads wte
  head_ = std::make_unique<GptHead>(cfg_, &wte_, head_index);
  head_->set_index(head_index);
}

std::vector<Layer*> GptModel::layers() {
  std::vector<Layer*> out{embedding_.get()};
  for (auto& b : blocks_) out.push_back(b.get());
  out.push_back(head_.get());
  return out;
}

std::vector<std::pair<std::string, int64_t>> GptModel::config_attributes() const {
  // Hugging Face GPT2Config names.
  return {{"vocab_size", cfg_.vocab_size}, {"n_positions", cfg_.max_seq_len}, {"n_embd", cfg_.d_model},
          {"n_layer", cfg_.n_layers},       {"n_head", cfg_.n_heads}};
}

std::vector<std::string> GptModel::ignorable_checkpoint_names() const {
  // lm_head.weight is tied to transformer.wte.weight; attn.bias / attn.masked_bias are causal-mask
  // buffers some versions of the PyTorch model store.
  std::vector<std::string> names{"lm_head.weight"};
  for (int i = 0; i < cfg_.n_layers; ++i) {
    names.push_back("transformer.h." + std::to_string(i) + ".attn.bias");
    names.push_back("transformer.h." + std::to_string(i) + ".attn.masked_bias");
  }
  return names;
}

}  // namespace tetra
