// model.rope_scaling both ways: the config's RopeScalingArgs checked (naming the keys) and turned into
// the op library's RopeScaling, and Hugging Face's config.json spelling — `rope_scaling` (transformers
// 4) or `rope_parameters` (transformers 5), the type as `rope_type` or `type` — read and written.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "models/model_args.h"
#include "runtime/rope.h"

namespace tetra {

// The types tetra applies, as their config text.
const std::vector<std::string>& rope_scaling_types();

// Throws ModelArgsError naming model.rope_scaling.KEY: a key the type needs is missing (0), a key the
// type does not read is set, a factor not positive, llama3's high_freq_factor not above low_freq_factor.
void validate_rope_scaling(const RopeScalingArgs& args);

// The op library's form (validate first).
RopeScaling rope_scaling_of(const RopeScalingArgs& args);

// config.json's rope_scaling: null for none, else {"rope_type": TYPE, and the keys the type reads}.
nlohmann::json rope_scaling_json(const RopeScalingArgs& args);

// The scaling a config.json object describes: rope_parameters if it is an object, else rope_scaling;
// absent, null or rope_type "default" is none. Throws a Checkpoint error naming `file`, the field and
// the value for another type (yarn, dynamic, longrope, ...), a missing or non-numeric key the type needs.
RopeScalingArgs rope_scaling_from_json(const nlohmann::json& config, const std::string& file);

// rope_theta of a config.json: the top-level field (transformers 4) or rope_parameters.rope_theta
// (transformers 5); nullopt when neither is a number.
std::optional<double> rope_theta_from_json(const nlohmann::json& config);

}  // namespace tetra
