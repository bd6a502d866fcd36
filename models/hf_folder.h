// Hugging Face model folders (ARCHITECTURE.md §6): config.json (Model::hf_config) and the weights
// as safetensors, either one model.safetensors or shards listed by model.safetensors.index.json
// ({"weight_map": {tensor: shard file}}). Names and layouts as models/stored_tensors.h gives them,
// so transformers' LlamaForCausalLM / GPT2LMHeadModel load the folder as it is.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/weight_source.h"

namespace tetra {

// A folder as a WeightSource: config.json's fields are its attributes (booleans as 0/1), model_type
// its arch; tensors of F32, BF16, F16 or F64. Errors name the folder and the file.
std::unique_ptr<WeightSource> open_hf_folder(const std::string& dir);

// What an exported folder holds besides config.json and the weights, and how the weights are split.
struct HfFolderExtras {
  // Weights above this many bytes are split into model-0000i-of-0000n.safetensors shards listed by
  // model.safetensors.index.json, as transformers' save_pretrained(max_shard_size) does: tensors in
  // name order, a new shard when the next one would overflow the current (a tensor larger than the
  // limit gets a shard of its own).
  int64_t max_shard_bytes = 5'000'000'000;
  std::vector<std::string> copy_files;                // copied in under their file names
  std::map<std::string, nlohmann::json> json_files;   // file name → content (generation_config.json)
  nlohmann::json config_fields = nlohmann::json::object();  // merged into config.json (bos/eos ids)
};

// Writes the folder `dir` (its parent must exist; `dir` must not exist or be empty): config.json
// (with torch_dtype), the weights (one model.safetensors, or shards and their index) and
// `extras`' files. `values[i]` is the full fp32 host tensor of model.params()[i] in tetra's layout;
// `dtype` is DType::F32 or DType::BF16. Everything is written into a hidden sibling folder that is
// renamed to `dir` at the end: a failure leaves no half-written folder.
void write_hf_folder(const std::string& dir, Model& model, const std::vector<Tensor>& values, DType dtype,
                     const HfFolderExtras& extras = {});

// Which shard each of tensors of `bytes` goes to under `max_bytes` (HfFolderExtras::max_shard_bytes).
std::vector<size_t> plan_shards(const std::vector<int64_t>& bytes, int64_t max_bytes);

}  // namespace tetra
