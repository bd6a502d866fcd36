#include "launch/config/init_from.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "launch/config/schema.h"
#include "models/hf_args.h"
#include "runtime/error.h"

namespace tetra::launch {

namespace {

// The schema's fields a row sets: the key itself, or every key of a mapping (rope_scaling.*).
std::vector<const schema::Field*> fields_of(const std::string& model_key) {
  std::vector<const schema::Field*> out;
  for (const schema::Field& f : schema::fields()) {
    if (std::string(f.section) != "model") continue;
    const std::string key = f.key;
    if (key == model_key || key.rfind(model_key + ".", 0) == 0) out.push_back(&f);
  }
  return out;
}

void copy_value(const schema::Field& f, const Config& from, Config& to) {
  const void* src = f.cget(from);
  void* dst = f.get(to);
  switch (f.type) {
    case schema::Type::Int: *static_cast<int*>(dst) = *static_cast<const int*>(src); return;
    case schema::Type::Int64: *static_cast<int64_t*>(dst) = *static_cast<const int64_t*>(src); return;
    case schema::Type::Float: *static_cast<double*>(dst) = *static_cast<const double*>(src); return;
    case schema::Type::Bool: *static_cast<bool*>(dst) = *static_cast<const bool*>(src); return;
    case schema::Type::String:
    case schema::Type::Choice: *static_cast<std::string*>(dst) = *static_cast<const std::string*>(src); return;
    default: TETRA_FAIL(Internal, "model key ", f.path(), " of a type config.json cannot set");
  }
}

// "FILE:LINE: KEY" for a key of the YAML, "--set KEY" for an override (which names it already).
std::string at(const Config& cfg, const std::string& path) {
  const std::string where = cfg.origins.where(path);
  return where == "--set " + path ? where : where + ": " + path;
}

// Numbers agree to 1e-6 relative (an epsilon written as 1e-5 in YAML and as fp32's
// 9.999999747378752e-06 in config.json), everything else exactly.
bool agree(const schema::Field& f, const Config& a, const Config& b) {
  if (f.type != schema::Type::Float) return schema::value_text(f, a) == schema::value_text(f, b);
  const double x = *static_cast<const double*>(f.cget(a)), y = *static_cast<const double*>(f.cget(b));
  return std::abs(x - y) <= 1e-6 * std::max(std::abs(x), std::abs(y));
}

// One key: the folder's value, or the YAML's when it agrees; a YAML value that differs is an error
// naming both places.
void take(Config& cfg, const Config& folder, const schema::Field& f, const std::string& hf_name,
          const std::string& file) {
  const std::string path = f.path(), mine = schema::value_text(f, cfg), theirs = schema::value_text(f, folder);
  if (cfg.origins.given(path)) {
    if (!agree(f, cfg, folder))
      TETRA_FAIL(Config, at(cfg, path), ": ", mine, " here, but ", file, " gives ", theirs, " (",
                 hf_name, "); remove ", path, " (model.init_from's config.json gives the model's shape) or set it to ",
                 theirs);
    return;
  }
  copy_value(f, folder, cfg);
  cfg.origins.from_folder[path] = file + " (" + hf_name + ")";
}

}  // namespace

void model_from_init_folder(Config& cfg) {
  std::error_code ec;
  if (cfg.model.init_from.empty() || !std::filesystem::is_directory(cfg.model.init_from, ec)) return;
  HfShape shape;
  try {
    shape = hf_shape(cfg.model.init_from);
  } catch (const Error& e) {  // a folder the config cannot use: a config error at model.init_from (exit 2)
    TETRA_FAIL(Config, at(cfg, "model.init_from"), ": ", e.what());
  }
  Config folder = cfg;
  static_cast<ModelArgs&>(folder.model) = shape.args;
  take(cfg, folder, *schema::find("model", "arch"), "model_type", shape.file);
  for (const HfConfigKey* row : shape.given)
    for (const schema::Field* f : fields_of(row->model_key)) take(cfg, folder, *f, row->hf_name, shape.file);
}

}  // namespace tetra::launch
