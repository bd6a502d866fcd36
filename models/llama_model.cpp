#include "models/llama_model.h"

#include <map>
#include "models/rope_scaling.h"

namespace tetra {

LlamaModel::LlamaModel(const LlamaConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  embed_tokens_.name = "model.embed_tokens.weight";
  embed_tokens_.full_shape = embed_tokens_.local_shape = {cfg.vocab_size, cfg.d_model};
  embed_tokens_.init_std = 0.02f;
  embed_tokens_.layer_index = 0;
  embedding_ = std::make_unique<LlamaEmbedding>(cfg_, &embed_tokens_);
  embedding_->set_index(0);
  for (int i = 0; i < cfg.n_layers; ++i) {
    if (cfg_.moe_block(i))
      blocks_.push_back(std::make_unique<LlamaMoeBlock>(cfg_, i));
    else
      blocks_.push_back(std::make_unique<LlamaBlock>(cfg_, i));
    blocks_.back()->set_index(i + 1);
    blocks_.back()->set_recompute(cfg.recompute);
  }
  const int head_index = static_cast<int>(cfg.n_layers) + 1;
  if (cfg.tie_embeddings) {
    embed_tokens_.tied_layers = {head_index};  // the output layer reads it
    embed_tokens_.placement.tie_group = "embed_tokens";
  }
  head_ = std::make_unique<LlamaHead>(cfg_, cfg.tie_embeddings ? &embed_tokens_ : nullptr, head_index);
  head_->set_index(head_index);
}

std::vector<Layer*> LlamaModel::layers() {
  std::vector<Layer*> out{embedding_.get()};
  for (auto& b : blocks_) out.push_back(b.get());
  out.push_back(head_.get());
  return out;
}

void LlamaModel::set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan) {
  if (tp && tp->size() == 1) tp = nullptr;  // one rank: the plain layers
  embedding_->set_tensor_parallel(tp);
  for (auto& b : blocks_) {
    if (auto* dense = dynamic_cast<LlamaBlock*>(b.get()))
      dense->set_tensor_parallel(tp, plan);
    else if (tp)  // launch/config/validate.cpp refuses tp > 1 with model.moe before this
      TETRA_FAIL(Config, "parallel.tp: ", tp->size(), " with model.moe: the MoE blocks have no tensor-parallel form "
                 "yet (use parallel.tp: 1 with model.moe.n_experts > 0)");
  }
  head_->set_tensor_parallel(tp);
}

std::vector<ModelAttribute> LlamaModel::config_attributes() const {
  // Hugging Face LlamaConfig names.
  using K = ModelAttribute::Kind;
  auto d = [](int64_t v) { return static_cast<double>(v); };
  std::vector<ModelAttribute> a = {{"vocab_size", K::Int, d(cfg_.vocab_size), "model.vocab_size"},
          {"hidden_size", K::Int, d(cfg_.d_model), "model.d_model"},
          {"num_hidden_layers", K::Int, d(cfg_.n_layers), "model.n_layers"},
          {"num_attention_heads", K::Int, d(cfg_.n_heads), "model.n_heads"},
          {"num_key_value_heads", K::Int, d(cfg_.kv_heads()), "model.n_kv_heads"},
          {"head_dim", K::Int, d(cfg_.head_dim()), cfg_.arch == "qwen3" ? "model.head_dim" : "model.d_model"},
          {"intermediate_size", K::Int, d(cfg_.ffn()), "model.ffn_dim"},
          {"tie_word_embeddings", K::Bool, cfg_.tie_embeddings ? 1.0 : 0.0, "model.tie_embeddings"},
          {"rope_theta", K::Float, decimal_of(cfg_.rope_theta), "model.rope_theta"},
          {"rms_norm_eps", K::Float, decimal_of(cfg_.norm_eps), "model.norm_eps"}};
  // Qwen2 applies a sliding window only with use_sliding_window, which tetra does not run;
  // Mistral's window (0 here, null in config.json: none) must match the file's.
  if (cfg_.arch == "qwen2" || cfg_.arch == "qwen3") a.push_back({"use_sliding_window", K::Bool, 0.0, ""});
  if (cfg_.arch == "qwen3") a.push_back({"attention_bias", K::Bool, 0.0, ""});  // Qwen3 trains without
  if (cfg_.arch == "mistral") a.push_back({"sliding_window", K::Int, d(cfg_.sliding_window), "model.sliding_window"});
  if (cfg_.moe.enabled()) {
    // DeepseekV3Config's names for the mixture of experts.
    const MoeArgs& m = cfg_.moe;
    a.insert(a.end(), {{"n_routed_experts", K::Int, d(m.n_experts), "model.moe.n_experts"},
                       {"num_experts_per_tok", K::Int, d(m.top_k), "model.moe.top_k"},
                       {"n_shared_experts", K::Int, d(m.n_shared), "model.moe.n_shared"},
                       {"moe_intermediate_size", K::Int, d(cfg_.expert_ffn()), "model.moe.ffn_dim"},
                       {"first_k_dense_replace", K::Int, d(m.first_k_dense), "model.moe.first_k_dense"},
                       {"n_group", K::Int, d(m.n_group), "model.moe.n_group"},
                       {"topk_group", K::Int, d(m.topk_group), "model.moe.topk_group"},
                       {"routed_scaling_factor", K::Float, decimal_of(static_cast<float>(m.route_scale)),
                        "model.moe.route_scale"}});
  }
  return a;
}

nlohmann::json LlamaModel::hf_config() const {
  nlohmann::json j;
  static const std::map<std::string, std::string> classes = {
      {"llama", "LlamaForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"},
      {"mistral", "MistralForCausalLM"}};
  j["architectures"] = {classes.at(cfg_.arch)};
  j["model_type"] = cfg_.arch;
  for (const ModelAttribute& a : config_attributes()) {
    if (a.kind == ModelAttribute::Kind::Int)
      j[a.name] = static_cast<int64_t>(a.value);
    else if (a.kind == ModelAttribute::Kind::Bool)
      j[a.name] = a.value != 0;
    else
      j[a.name] = a.value;
  }
  j["max_position_embeddings"] = cfg_.max_seq_len;
  j["hidden_act"] = "silu";
  if (cfg_.arch == "llama") {  // Qwen2 has its q/k/v biases by class; Qwen3 writes attention_bias; Mistral has none
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  if (cfg_.arch == "mistral" && cfg_.sliding_window == 0) j["sliding_window"] = nullptr;
  if (cfg_.arch == "qwen2" || cfg_.arch == "qwen3") j["max_window_layers"] = cfg_.n_layers;
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["pretraining_tp"] = 1;
  j["rope_scaling"] = rope_scaling_json(cfg_.rope_scaling);  // null for plain RoPE
  j["use_cache"] = true;
  if (cfg_.moe.enabled()) {
    // The router as DeepseekV3's: sigmoid scores, the correction bias choosing ("noaux_tc"), the
    // chosen scores normalised. transformers has no class for Llama attention with this MoE;
    // these fields and the tensors' names are DeepseekV3's.
    j["scoring_func"] = "sigmoid";
    j["topk_method"] = "noaux_tc";
    j["norm_topk_prob"] = true;
  }
  return j;
}

std::vector<std::string> LlamaModel::ignorable_checkpoint_names() const {
  // A tied model may still carry lm_head.weight (a copy of the embedding); older Hugging Face
  // checkpoints store the rotary inverse frequencies as a buffer.
  std::vector<std::string> names;
  if (cfg_.tie_embeddings) names.push_back("lm_head.weight");
  for (int i = 0; i < cfg_.n_layers; ++i)
    names.push_back("model.layers." + std::to_string(i) + ".self_attn.rotary_emb.inv_freq");
  return names;
}

}  // namespace tetra
