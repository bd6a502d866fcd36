// The value of data.train / data.val: a token file, a glob, a list of shards, or (data.train) a
// weighted blend (data/data_spec.h, docs/data.md). In a Config it is kept as text — the path as
// written, or a canonical YAML flow list — so that the struct, to_yaml and checkpoint metadata
// treat it as one value; data_spec() turns that text into the data layer's DataSpec.
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>

#include "data/data_spec.h"

namespace tetra::launch {

// Reads a YAML value of a data-sources key into `canonical` (the text a Config stores). Returns ""
// or what is wrong ("entry 2: weight -1 is not a positive number"). A null value is "" (not set).
std::string read_data_sources(const YAML::Node& value, std::string& canonical);

// The DataSpec a stored value stands for (empty when the text is ""). `key` names it in messages.
data::DataSpec data_spec(const std::string& text, const std::string& key);

// How a stored value is written in YAML (the canonical list as is, a path quoted where needed).
std::string data_sources_yaml(const std::string& text);

// "what would be valid" for a data-sources key.
const char* data_sources_valid_text();

}  // namespace tetra::launch
