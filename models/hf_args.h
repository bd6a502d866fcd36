// A Hugging Face folder's config.json as the model.* keys (docs/models.md "Shapes from config.json"):
// the family from model_type, then one row per config.json field that sets a key. launch/ fills the
// model section from it when model.init_from is a folder, and checks the keys the YAML also gives.
// A family adds its fields as rows of hf_config_keys() (models/hf_args.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model_args.h"

namespace tetra {

struct HfConfigKey {
  const char* hf_name;    // the config.json field the row reads (messages and docs)
  const char* model_key;  // the model.* key it sets, without "model."; a mapping's name for all its keys
  // Sets the key from config.json; false when config.json does not give it (the key then keeps the
  // YAML's value or its default). Throws a Checkpoint error naming `file`, the field and its value
  // when the value is of the wrong kind.
  bool (*read)(const nlohmann::json& config, const char* hf_name, const std::string& file, ModelArgs& args);
};

// Every row, every family's.
const std::vector<HfConfigKey>& hf_config_keys();

struct HfShape {
  std::string file;                      // DIR/config.json
  ModelArgs args;                        // arch from model_type and every key of `given`; defaults elsewhere
  std::vector<const HfConfigKey*> given;  // the rows config.json gave, of keys the family reads, in table order
};

// Reads DIR/config.json. Throws a Checkpoint error naming the file for a missing or unreadable file,
// a model_type that is no registered family, a value of the wrong kind, a rope scaling tetra does not
// apply.
HfShape hf_shape(const std::string& dir);

}  // namespace tetra
