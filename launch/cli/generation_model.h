// The model `tetra generate MODEL` names, loaded onto one device: a Hugging Face folder
// (config.json), a consolidated HDF5 file (its attributes), or a checkpoint directory
// RUN_DIR/checkpoints/step_N (the run's config, launch/checkpoint/full_model.h). Its shape comes
// from the file: each config field the family lists (Model::config_attributes, Hugging Face's
// names) sets the config key it names, so any family of the registry loads the same way.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/weight_source.h"
#include "parallel/param_set.h"

namespace tetra::launch {

struct GenerationModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamSet> params;  // the working weights on the device, in its dtype
  int64_t max_length = 0;            // tokens of prompt and continuation (model.seq_len)
  std::vector<int64_t> eos_ids;      // end-of-text ids (generation_config.json, config.json); may be empty
  std::string folder;                // the Hugging Face folder beside the weights (tokenizer files), or ""
};

// `min_length`: the sequence length to allow where the file names none (a consolidated Llama file
// carries no max_position_embeddings). Errors name MODEL and what it lacks.
GenerationModel load_generation_model(const std::string& path, Device device, DType dtype, int64_t min_length);

// The model.* values a weight source's config fields give (arch from model_type / the arch
// attribute): "model.KEY=VALUE" overrides for parse_config.
std::vector<std::string> model_overrides_of(const WeightSource& source, int64_t min_length);

}  // namespace tetra::launch
