#include "models/rope_scaling.h"

#include <cmath>

#include "runtime/error.h"

namespace tetra {

namespace {

// One key of model.rope_scaling: its name (Hugging Face's too), whether `type` reads it, its value.
struct ScalingKey {
  const char* name;
  bool linear, llama3;
  double value;
};

std::vector<ScalingKey> scaling_keys(const RopeScalingArgs& a) {
  return {{"factor", true, true, a.factor},
          {"low_freq_factor", false, true, a.low_freq_factor},
          {"high_freq_factor", false, true, a.high_freq_factor},
          {"original_max_position_embeddings", false, true, static_cast<double>(a.original_max_position_embeddings)}};
}

bool reads(const ScalingKey& k, const std::string& type) {
  return (type == "linear" && k.linear) || (type == "llama3" && k.llama3);
}

std::string text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

const std::vector<std::string>& rope_scaling_types() {
  static const std::vector<std::string> types = {"none", "linear", "llama3"};
  return types;
}

void validate_rope_scaling(const RopeScalingArgs& a) {
  const std::string& type = a.type;
  if (type != "none" && type != "linear" && type != "llama3")
    throw ModelArgsError({"model.rope_scaling.type"}, "'" + type + "' is not a rope scaling tetra applies (none, "
                                                      "linear, llama3)");
  for (const ScalingKey& k : scaling_keys(a)) {
    const std::string key = std::string("model.rope_scaling.") + k.name;
    if (!reads(k, type)) {
      if (k.value != 0)
        throw ModelArgsError({key, "model.rope_scaling.type"},
                             "set to " + text(k.value) + ", but type " + type + " does not read it; remove it" +
                                 (type == "llama3" ? "" : " or set model.rope_scaling.type: llama3"));
      continue;
    }
    if (!(std::isfinite(k.value) && k.value > 0))
      throw ModelArgsError({key, "model.rope_scaling.type"},
                           (k.value == 0 ? std::string("missing") : text(k.value) + " is not a positive number") +
                               "; type " + type + " needs it (e.g. Llama 3.1: factor 8, low_freq_factor 1, "
                               "high_freq_factor 4, original_max_position_embeddings 8192)");
  }
  if (type == "llama3" && !(a.high_freq_factor > a.low_freq_factor))
    throw ModelArgsError({"model.rope_scaling.high_freq_factor", "model.rope_scaling.low_freq_factor"},
                         text(a.high_freq_factor) + " is not above low_freq_factor " + text(a.low_freq_factor) +
                             " (the frequencies between the two are blended; e.g. 4 and 1)");
}

RopeScaling rope_scaling_of(const RopeScalingArgs& a) {
  RopeScaling s;
  if (a.type == "linear") {
    s.type = RopeScaling::Type::Linear;
    s.factor = a.factor;
  } else if (a.type == "llama3") {
    s.type = RopeScaling::Type::Llama3;
    s.factor = a.factor;
    s.low_freq_factor = a.low_freq_factor;
    s.high_freq_factor = a.high_freq_factor;
    s.original_max_position_embeddings = static_cast<double>(a.original_max_position_embeddings);
  }
  return s;
}

nlohmann::json rope_scaling_json(const RopeScalingArgs& a) {
  if (a.type == "none") return nullptr;
  nlohmann::json j;
  j["rope_type"] = a.type;
  for (const ScalingKey& k : scaling_keys(a)) {
    if (!reads(k, a.type)) continue;
    if (std::string(k.name) == "original_max_position_embeddings")
      j[k.name] = a.original_max_position_embeddings;
    else
      j[k.name] = k.value;
  }
  return j;
}

RopeScalingArgs rope_scaling_from_json(const nlohmann::json& config, const std::string& file) {
  RopeScalingArgs a;
  const char* field = "rope_scaling";
  const nlohmann::json* s = nullptr;
  for (const char* name : {"rope_parameters", "rope_scaling"}) {
    auto it = config.find(name);
    if (it == config.end() || it->is_null()) continue;
    if (!it->is_object())
      TETRA_FAIL(Checkpoint, file, ": ", name, " is ", it->dump(), ", not an object (rope_type and its factors)");
    field = name;
    s = &*it;
    break;
  }
  if (!s) return a;
  auto type_it = s->find("rope_type");
  if (type_it == s->end()) type_it = s->find("type");
  const std::string type = type_it == s->end() ? "default" : type_it->is_string() ? type_it->get<std::string>() : type_it->dump();
  if (type == "default") return a;
  if (type != "linear" && type != "llama3")
    TETRA_FAIL(Checkpoint, file, ": ", field, ".rope_type is '", type, "': tetra applies linear and llama3 rope "
               "scaling only (training with plain RoPE would be a different model)");
  a.type = type;
  for (const ScalingKey& k : scaling_keys(a)) {
    if (!reads(k, type)) continue;
    auto v = s->find(k.name);
    if (v == s->end() || !v->is_number())
      TETRA_FAIL(Checkpoint, file, ": ", field, ".", k.name, " is ", v == s->end() ? "missing" : v->dump(),
                 "; rope_type ", type, " needs it as a number");
    const double x = v->get<double>();
    if (std::string(k.name) == "factor") a.factor = x;
    if (std::string(k.name) == "low_freq_factor") a.low_freq_factor = x;
    if (std::string(k.name) == "high_freq_factor") a.high_freq_factor = x;
    if (std::string(k.name) == "original_max_position_embeddings") {
      if (x != std::floor(x) || x < 1)
        TETRA_FAIL(Checkpoint, file, ": ", field, ".", k.name, " is ", v->dump(), ", not a positive whole number");
      a.original_max_position_embeddings = static_cast<int64_t>(x);
    }
  }
  return a;
}

std::optional<double> rope_theta_from_json(const nlohmann::json& config) {
  auto it = config.find("rope_theta");
  if (it != config.end() && it->is_number()) return it->get<double>();
  auto p = config.find("rope_parameters");
  if (p != config.end() && p->is_object()) {
    auto t = p->find("rope_theta");
    if (t != p->end() && t->is_number()) return t->get<double>();
  }
  return std::nullopt;
}

}  // namespace tetra
