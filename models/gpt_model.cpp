#include "models/gpt_model.h"

namespace tetra {

GptModel::GptModel(const GptConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  wte_.name = "transformer.wte.weight";
  wte_.full_shape = wte_.local_shape = {cfg.vocab_size, cfg.d_model};
  wte_.init_std = 0.02f;
  wte_.layer_index = 0;
  wte_.placement.tie_group = "wte";  // the token embedding and the LM head read one matrix
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

void GptModel::set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan) {
  if (tp && tp->size() == 1) tp = nullptr;  // one rank: the plain layers
  embedding_->set_tensor_parallel(tp);
  for (auto& b : blocks_) b->set_tensor_parallel(tp, plan);
  head_->set_tensor_parallel(tp);
}

std::vector<ModelAttribute> GptModel::config_attributes() const {
  // Hugging Face GPT2Config names.
  using K = ModelAttribute::Kind;
  auto d = [](int64_t v) { return static_cast<double>(v); };
  return {{"vocab_size", K::Int, d(cfg_.vocab_size), "model.vocab_size"},
          {"n_positions", K::Int, d(cfg_.max_seq_len), "model.seq_len"},
          {"n_embd", K::Int, d(cfg_.d_model), "model.d_model"},
          {"n_layer", K::Int, d(cfg_.n_layers), "model.n_layers"},
          {"n_head", K::Int, d(cfg_.n_heads), "model.n_heads"},
          {"layer_norm_epsilon", K::Float, decimal_of(cfg_.ln_eps), "model.ln_eps"}};
}

nlohmann::json GptModel::hf_config() const {
  nlohmann::json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  for (const ModelAttribute& a : config_attributes()) {
    if (a.kind == ModelAttribute::Kind::Int)
      j[a.name] = static_cast<int64_t>(a.value);
    else
      j[a.name] = a.value;
  }
  j["n_ctx"] = cfg_.max_seq_len;
  j["activation_function"] = "gelu_new";
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["attn_pdrop"] = 0.0;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = true;
  return j;
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
