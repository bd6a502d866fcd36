#include "models/hf_args.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "models/model_family.h"
#include "models/rope_scaling.h"
#include "runtime/error.h"

namespace tetra {

namespace {

using nlohmann::json;

// The field's value, or nullptr when absent or null.
const json* field(const json& config, const char* name) {
  auto it = config.find(name);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void wrong(const std::string& file, const char* name, const json& v, const char* what) {
  TETRA_FAIL(Checkpoint, file, ": ", name, " is ", v.dump(), ", not ", what);
}

// A whole number into `out`; false when absent.
bool get_int(const json& c, const char* name, const std::string& file, int64_t& out) {
  const json* v = field(c, name);
  if (!v) return false;
  if (v->is_number_integer()) {
    out = v->get<int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::abs(v->get<double>()) < 9e15) {
    out = static_cast<int64_t>(v->get<double>());
  } else {
    wrong(file, name, *v, "a whole number");
  }
  return true;
}

template <int64_t ModelArgs::*F>
bool read_int(const json& c, const char* name, const std::string& file, ModelArgs& a) {
  return get_int(c, name, file, a.*F);
}

template <int64_t MoeArgs::*F>
bool read_moe_int(const json& c, const char* name, const std::string& file, ModelArgs& a) {
  return get_int(c, name, file, a.moe.*F);
}

template <double ModelArgs::*F>
bool read_float(const json& c, const char* name, const std::string& file, ModelArgs& a) {
  const json* v = field(c, name);
  if (!v) return false;
  if (!v->is_number()) wrong(file, name, *v, "a number");
  a.*F = v->get<double>();
  return true;
}

template <bool ModelArgs::*F>
bool read_bool(const json& c, const char* name, const std::string& file, ModelArgs& a) {
  const json* v = field(c, name);
  if (!v) return false;
  if (!v->is_boolean()) wrong(file, name, *v, "true or false");
  a.*F = v->get<bool>();
  return true;
}

// GPT-2's n_ctx, read only where n_positions is absent (older configs carry both, equal).
bool read_n_ctx(const json& c, const char* name, const std::string& file, ModelArgs& a) {
  return !field(c, "n_positions") && read_int<&ModelArgs::seq_len>(c, name, file, a);
}

// transformers' Llama, Qwen and Mistral configs default rms_norm_eps to 1e-6 when it is absent.
bool read_rms_norm_eps(const json& c, const char* name, const std::string& file, ModelArgs& a) {
  if (!read_float<&ModelArgs::norm_eps>(c, name, file, a)) a.norm_eps = 1e-6;
  return true;
}

// Top-level (transformers 4) or inside rope_parameters (transformers 5).
bool read_rope_theta(const json& c, const char* name, const std::string& file, ModelArgs& a) {
  if (const json* v = field(c, name); v && !v->is_number()) wrong(file, name, *v, "a number");
  const std::optional<double> theta = rope_theta_from_json(c);
  if (theta) a.rope_theta = *theta;
  return theta.has_value();
}

// Absent or null is plain RoPE, as transformers reads it: always given.
bool read_rope_scaling(const json& c, const char* name, const std::string& file, ModelArgs& a) {
  a.rope_scaling = rope_scaling_from_json(c, file);
  return true;
}

// Mistral's window: null (or absent) is none, as transformers reads it; always given.
bool read_sliding_window(const json& c, const char* name, const std::string& file, ModelArgs& a) {
  a.sliding_window = 0;
  get_int(c, name, file, a.sliding_window);
  return true;
}

bool family_reads(const std::vector<std::string>& keys, const std::string& key) {
  for (const std::string& k : keys)
    if (k == key || k.rfind(key + ".", 0) == 0) return true;
  return false;
}

}  // namespace

const std::vector<HfConfigKey>& hf_config_keys() {
  static const std::vector<HfConfigKey> rows = {
      // Every family.
      {"vocab_size", "vocab_size", read_int<&ModelArgs::vocab_size>},
      // GPT-2 (GPT2Config).
      {"n_positions", "seq_len", read_int<&ModelArgs::seq_len>},
      {"n_ctx", "seq_len", read_n_ctx},
      {"n_embd", "d_model", read_int<&ModelArgs::d_model>},
      {"n_layer", "n_layers", read_int<&ModelArgs::n_layers>},
      {"n_head", "n_heads", read_int<&ModelArgs::n_heads>},
      {"layer_norm_epsilon", "ln_eps", read_float<&ModelArgs::ln_eps>},
      // Llama (LlamaConfig); max_position_embeddings is the model's limit, not a training length:
      // model.seq_len stays the YAML's.
      {"hidden_size", "d_model", read_int<&ModelArgs::d_model>},
      {"num_hidden_layers", "n_layers", read_int<&ModelArgs::n_layers>},
      {"num_attention_heads", "n_heads", read_int<&ModelArgs::n_heads>},
      {"num_key_value_heads", "n_kv_heads", read_int<&ModelArgs::n_kv_heads>},
      {"intermediate_size", "ffn_dim", read_int<&ModelArgs::ffn_dim>},
      {"rms_norm_eps", "norm_eps", read_rms_norm_eps},
      {"rope_theta", "rope_theta", read_rope_theta},
      {"rope_scaling", "rope_scaling", read_rope_scaling},
      {"tie_word_embeddings", "tie_embeddings", read_bool<&ModelArgs::tie_embeddings>},
      // Qwen3's explicit head width; Mistral's attention window.
      {"head_dim", "head_dim", read_int<&ModelArgs::head_dim>},
      {"sliding_window", "sliding_window", read_sliding_window},
      // Llama with MoE layers (DeepseekV3Config's names, as tetra writes them).
      {"n_routed_experts", "moe.n_experts", read_moe_int<&MoeArgs::n_experts>},
      {"num_experts_per_tok", "moe.top_k", read_moe_int<&MoeArgs::top_k>},
      {"n_shared_experts", "moe.n_shared", read_moe_int<&MoeArgs::n_shared>},
      {"moe_intermediate_size", "moe.ffn_dim", read_moe_int<&MoeArgs::ffn_dim>},
      {"first_k_dense_replace", "moe.first_k_dense", read_moe_int<&MoeArgs::first_k_dense>},
      {"n_group", "moe.n_group", read_moe_int<&MoeArgs::n_group>},
      {"topk_group", "moe.topk_group", read_moe_int<&MoeArgs::topk_group>},
  };
  return rows;
}

HfShape hf_shape(const std::string& dir) {
  namespace fs = std::filesystem;
  HfShape s;
  s.file = (fs::path(dir) / "config.json").string();
  std::ifstream in(s.file);
  if (!in) TETRA_FAIL(Checkpoint, dir, ": not a Hugging Face model folder (cannot read config.json)");
  json config;
  try {
    config = json::parse(in);
  } catch (const json::exception& e) {
    TETRA_FAIL(Checkpoint, s.file, ": not valid JSON (", e.what(), ")");
  }
  if (!config.is_object()) TETRA_FAIL(Checkpoint, s.file, ": not a JSON object");
  const json* type = field(config, "model_type");
  if (!type || !type->is_string())
    TETRA_FAIL(Checkpoint, s.file, ": model_type is ", type ? type->dump() : "missing", "; it names the family");
  const std::vector<std::string> families = model_family_names();
  s.args.arch = type->get<std::string>();
  if (std::find(families.begin(), families.end(), s.args.arch) == families.end()) {
    std::string names;
    for (const std::string& n : families) names += (names.empty() ? "" : ", ") + n;
    TETRA_FAIL(Checkpoint, s.file, ": model_type '", s.args.arch, "' is not a family tetra has (", names, ")");
  }
  std::vector<std::string> keys = common_model_keys();
  for (const std::string& k : model_family(s.args.arch).config_keys()) keys.push_back(k);
  for (const HfConfigKey& row : hf_config_keys())
    if (family_reads(keys, row.model_key) && row.read(config, row.hf_name, s.file, s.args)) s.given.push_back(&row);
  return s;
}

}  // namespace tetra
