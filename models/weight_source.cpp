#include "models/weight_source.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <filesystem>
#include <unordered_set>

#include "models/consolidated.h"
#include "models/hf_folder.h"
#include "models/rope_scaling.h"
#include "models/stored_tensors.h"
#include "parallel/param_placement.h"
#include "runtime/ops.h"
#include "runtime/safetensors.h"

namespace tetra {

namespace {

std::string value_text(ModelAttribute::Kind kind, double v) {
  if (kind == ModelAttribute::Kind::Bool) return v != 0 ? "true" : "false";
  if (kind == ModelAttribute::Kind::Int && std::abs(v) < 9e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

bool same_value(const ModelAttribute& want, double got) {
  if (want.kind != ModelAttribute::Kind::Float) return got == want.value;
  return std::abs(got - want.value) <= 1e-6 * std::max(std::abs(want.value), 1e-30);
}

// The file's rope scaling (config.json's rope_scaling or rope_parameters) against the model's: a
// different one is a different model. Files without either field (consolidated HDF5) are not checked.
void check_rope_scaling(const WeightSource& src, const nlohmann::json& own) {
  nlohmann::json file;
  for (const char* name : {"rope_parameters", "rope_scaling"})
    if (std::optional<nlohmann::json> f = src.config_field(name)) file[name] = *f;
  if (file.empty()) return;
  const RopeScalingArgs got = rope_scaling_from_json(file, src.path());
  const RopeScalingArgs want = rope_scaling_from_json(own, "the model");
  if (got == want) return;
  TETRA_FAIL(Checkpoint, src.path(), ": rope scaling is ", rope_scaling_json(got).dump(), " in the file, but the "
             "model.rope_scaling keys give ", rope_scaling_json(want).dump(), "; set them as the file does (or leave "
             "the model's shape to the folder: model.init_from alone)");
}

}  // namespace

std::unique_ptr<WeightSource> open_weights(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return open_hf_folder(path);
  return open_consolidated(path);
}

LoadReport load_weights(const WeightSource& src, Model& model) {
  LoadReport report;
  const std::string path = src.path();
  if (std::optional<std::string> arch = src.arch(); arch && *arch != model.arch())
    TETRA_FAIL(Checkpoint, path, ": holds a ", *arch, " model, but model.arch is ", model.arch(),
               " (set model.arch: ", *arch, " and its shape to load it)");
  for (const ModelAttribute& want : model.config_attributes()) {
    const std::optional<double> got = src.attribute(want.name);
    if (!got || same_value(want, *got)) continue;
    if (want.config_key.empty())  // a setting the family does not run (ModelAttribute::config_key)
      TETRA_FAIL(Checkpoint, path, ": ", want.name, " is ", value_text(want.kind, *got), " in the file; tetra's ",
                 model.arch(), " runs only ", want.name, " ", value_text(want.kind, want.value),
                 " (docs/models.md), so it cannot load this model as it is");
    const std::string what = want.name + " is " + value_text(want.kind, *got) + " in the file, but " + want.config_key +
                             " gives " + value_text(want.kind, want.value);
    if (want.kind == ModelAttribute::Kind::Float)
      report.notes.push_back(what + " (training uses the config's value)");
    else
      TETRA_FAIL(Checkpoint, path, ": ", what, "; set ", want.config_key, ": ", value_text(want.kind, *got),
                 " to load this file");
  }
  const nlohmann::json own = model.hf_config();
  if (own.contains("rope_scaling")) check_rope_scaling(src, own);
  for (const auto& [key, value] : own.items()) {
    if (!value.is_null() || key == "rope_scaling") continue;
    const std::optional<nlohmann::json> got = src.config_field(key);
    if (got && !got->is_null())
      report.notes.push_back(key + " is " + got->dump() + " in the file; tetra's " + model.arch() +
                             " does not apply it");
  }

  std::unordered_set<std::string> known;
  for (Param* p : model.params()) {
    Tensor full = Tensor::empty(p->full_shape, DType::F32);
    for (const StoredTensor& t : stored_tensors(*p)) {
      known.insert(t.name);
      if (!src.has(t.name))
        TETRA_FAIL(Checkpoint, path, ": missing tensor '", t.name, "' (a ", model.arch(), " model of this shape needs it)");
      const Shape got = src.shape(t.name);
      if (got != t.shape)
        TETRA_FAIL(Checkpoint, path, ": tensor '", t.name, "' has shape ", shape_str(got), " but the model needs ",
                   shape_str(t.shape), " (check model.vocab_size, d_model, n_layers, n_heads and the family's own keys "
                   "against the file)");
      Tensor stored = src.read_f32(t.name);
      const float* v = stored.data<float>();
      for (int64_t i = 0; i < stored.numel(); ++i)
        if (!std::isfinite(v[i])) TETRA_FAIL(Checkpoint, path, ": tensor '", t.name, "' holds a non-finite value");
      from_stored(t, stored, full);
    }
    // A parameter another pipeline rank holds has no value here: checked, not loaded. The value is
    // this rank's slice (parallel/param_placement.h).
    if (p->value.defined()) ops::copy(p->value, local_piece(*p, full));
  }
  for (const std::string& n : model.ignorable_checkpoint_names()) known.insert(n);
  for (const std::string& n : src.names())
    if (!known.count(n)) report.unexpected.push_back(n);
  return report;
}

}  // namespace tetra
