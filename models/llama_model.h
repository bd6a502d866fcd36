// Llama (Hugging Face LlamaForCausalLM; Qwen2-, Qwen3- and MistralForCausalLM by cfg.arch):
// embedding, n_layers blocks, final RMSNorm + output layer + loss. The output layer is
// lm_head.weight, or the embedding when tie_embeddings.
#pragma once
#include <memory>

#include "models/llama_block.h"
#include "models/llama_moe_block.h"
#include "models/llama_config.h"
#include "models/llama_embedding.h"
#include "models/llama_head.h"
#include "models/model.h"

namespace tetra {

class LlamaModel : public Model {
 public:
  explicit LlamaModel(const LlamaConfig& cfg);
  std::string arch() const override { return cfg_.arch; }
  std::vector<Layer*> layers() override;
  int64_t num_params() const override { return cfg_.num_params(); }  // buffers not counted
  double flops_per_token(int64_t seq_len) const override { return cfg_.flops_per_token(seq_len); }
  std::vector<ModelAttribute> config_attributes() const override;
  nlohmann::json hf_config() const override;
  std::vector<std::string> ignorable_checkpoint_names() const override;
  void set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan) override;
  const LlamaConfig& config() const { return cfg_; }

 private:
  LlamaConfig cfg_;
  Param embed_tokens_;  // owned here: a tied output layer reads it too
  std::unique_ptr<LlamaEmbedding> embedding_;
  std::vector<std::unique_ptr<Layer>> blocks_;  // LlamaBlock or LlamaMoeBlock
  std::unique_ptr<LlamaHead> head_;
};

}  // namespace tetra
