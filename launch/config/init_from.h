// model.init_from a Hugging Face folder: its config.json gives the model section's shape
// (models/hf_args.h, one row per config.json field; docs/models.md "Shapes from config.json").
#pragma once
#include "launch/config/config.h"

namespace tetra::launch {

// When cfg.model.init_from is a directory: sets model.arch from config.json's model_type and every
// model key a row of hf_config_keys() reads, recording where each came from (KeyOrigins::from_folder).
// A key the YAML (or --set) also gives must hold the same value, else a Config error at the YAML key
// names both: "cfg.yaml:4: model.n_layers: 4 here, but DIR/config.json gives 2 (num_hidden_layers)".
// A folder whose config.json cannot be used (unreadable, a model_type with no family, a value of the
// wrong kind, a rope scaling tetra does not apply) is a Config error at model.init_from naming the file
// and the field. A path that is not a directory is left alone (a consolidated file; a missing path is reported by
// the required keys it leaves unset, or by validate_for_training).
void model_from_init_folder(Config& cfg);

}  // namespace tetra::launch
