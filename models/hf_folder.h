// Hugging Face model folders (ARCHITECTURE.md §6): config.json (Model::hf_config) and the weights
// as safetensors, either one model.safetensors or shards listed by model.safetensors.index.json
// ({"weight_map": {tensor: shard file}}). Names and layouts as models/stored_tensors.h gives them,
// so transformers' LlamaForCausalLM / GPT2LMHeadModel load the folder as it is.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/weight_source.h"

namespace tetra {

// A folder as a WeightSource: config.json's fields are its attributes (booleans as 0/1), model_type
// its arch; tensors of F32, BF16, F16 or F64. Errors name the folder and the file.
std::unique_ptr<WeightSource> open_hf_folder(const std::string& dir);

// Writes config.json (with torch_dtype) and model.safetensors into `dir` (created if missing; its
// parent must exist): `values[i]` is the full fp32 host tensor of model.params()[i] in tetra's
// layout; `dtype` is DType::F32 or DType::BF16. Each file is written to a .tmp name and renamed.
void write_hf_folder(const std::string& dir, Model& model, const std::vector<Tensor>& values, DType dtype);

}  // namespace tetra
