// The resolved config as YAML (RUN_DIR/config.yaml): every key of the schema, in schema order,
// so that load_config reads it back to an equal Config. Model keys the family of model.arch does
// not take are left out (validate() keeps them at their defaults), and so are the model.moe mapping
// of a dense model and the optimizer.decay_* keys of a schedule other than wsd; keys of a nested mapping ("moe.top_k") are written under it.
#include <algorithm>
#include <sstream>

#include "launch/config/config.h"
#include "launch/config/schema.h"
#include "models/model_family.h"

namespace tetra::launch {

namespace {
bool family_takes(const Config& cfg, const schema::Field& f) {
  if (std::string(f.section) != "model") return true;
  const std::vector<std::string>& common = common_model_keys();
  if (std::find(common.begin(), common.end(), f.key) != common.end()) return true;
  const std::vector<std::string> names = model_family_names();
  if (std::find(names.begin(), names.end(), cfg.model.arch) == names.end()) return true;  // not a family: all
  const std::vector<std::string> keys = model_family(cfg.model.arch).config_keys();
  return std::find(keys.begin(), keys.end(), f.key) != keys.end();
}

// A dense model (model.moe.n_experts 0) has no model.moe mapping, a schedule other than wsd no
// optimizer.decay_* keys: validate() keeps them at their defaults.
bool written(const Config& cfg, const schema::Field& f) {
  if (!family_takes(cfg, f)) return false;
  const std::string key = f.key;
  if (std::string(f.section) == "optimizer" && key.rfind("decay_", 0) == 0)
    return cfg.optimizer.schedule == LrDecay::Wsd;
  return std::string(f.section) != "model" || key.rfind("moe.", 0) != 0 || cfg.model.moe.n_experts > 0;
}
}  // namespace

std::string to_yaml(const Config& cfg) {
  std::ostringstream os;
  os << "# tetra experiment config, resolved: every key with its value, defaults included.\n";
  std::string section, mapping;
  for (const schema::Field& f : schema::fields()) {
    if (section != f.section) {
      section = f.section;
      mapping.clear();
      os << (os.tellp() > 0 ? "\n" : "") << section << ":\n";
    }
    if (!written(cfg, f)) continue;
    // A key "NAME.KEY" goes under the mapping NAME (model.moe).
    std::string key = f.key;
    const size_t dot = key.find('.');
    const std::string under = dot == std::string::npos ? "" : key.substr(0, dot);
    if (under != mapping) {
      mapping = under;
      if (!under.empty()) os << "  " << under << ":\n";
    }
    os << (under.empty() ? "  " : "    ") << key.substr(dot == std::string::npos ? 0 : dot + 1) << ": "
       << schema::value_text(f, cfg) << "\n";
  }
  return os.str();
}

}  // namespace tetra::launch
