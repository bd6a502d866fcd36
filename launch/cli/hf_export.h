// What `tetra ckpt consolidate --format hf` puts into a Hugging Face folder besides the weights: the
// tokenizer files of the folder the run started from (model.init_from) or of --tokenizer DIR, the
// begin/end-of-text ids, generation_config.json, and the shard size limit.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/hf_folder.h"

namespace tetra::launch {

// The files transformers' AutoTokenizer reads, copied where they exist.
const std::vector<std::string>& tokenizer_file_names();

// "5GB", "500MB", "2GiB", "1000000" (bytes) as bytes, as transformers reads max_shard_size (KB, MB,
// GB decimal; KiB, MiB, GiB binary). Throws a Usage error naming `option` otherwise.
int64_t parse_byte_size(const std::string& text, const std::string& option);

// bos_token_id / eos_token_id of a config.json or generation_config.json object: a number, a list
// of numbers, or absent/null (empty).
std::vector<int64_t> token_ids_field(const nlohmann::json& config, const std::string& key);

// The folder's extras. `init_from`: the run's model.init_from (used when it is a folder);
// `tokenizer_dir`: --tokenizer ("" = none; a folder holding at least one tokenizer file).
// Appends to `notes` what the folder will lack and why.
HfFolderExtras hf_export_extras(const std::string& init_from, const std::string& tokenizer_dir,
                                const std::string& max_shard_size, std::vector<std::string>& notes);

}  // namespace tetra::launch
