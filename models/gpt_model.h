// GPT-2: embedding, n_layers blocks, final LayerNorm + tied LM head + loss.
#pragma once
#include <memory>

#include "models/gpt_block.h"
#include "models/gpt_config.h"
#include "models/gpt_embedding.h"
#include "models/gpt_head.h"
#include "models/model.h"

namespace tetra {

class GptModel : public Model {
 public:
  explicit GptModel(const GptConfig& cfg);
  std::string arch() const override { return cfg_.arch; }
  std::vector<Layer*> layers() override;
  int64_t num_params() const override { return cfg_.num_params(); }
  double flops_per_token(int64_t seq_len) const override { return cfg_.flops_per_token(seq_len); }
  std::vector<ModelAttribute> config_attributes() const override;
  nlohmann::json hf_config() const override;
  std::vector<std::string> ignorable_checkpoint_names() const override;
  void set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan) override;
  const GptConfig& config() const { return cfg_; }

 private:
  GptConfig cfg_;
  Param wte_;  // shared by embedding and head
  std::unique_ptr<GptEmbedding> embedding_;
  std::vector<std::unique_ptr<GptBlock>> blocks_;
  std::unique_ptr<GptHead> head_;
};

}  // namespace tetra
