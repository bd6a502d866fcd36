#include "launch/cli/generation_model.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <sstream>

#include "launch/checkpoint/files.h"
#include "launch/checkpoint/full_model.h"
#include "launch/cli/hf_export.h"
#include "launch/config/config.h"
#include "launch/config/model.h"
#include "models/hf_args.h"
#include "models/model_family.h"
#include "runtime/error.h"
#include "runtime/ops.h"

namespace tetra::launch {

namespace fs = std::filesystem;

namespace {

std::string number_text(double v, ModelAttribute::Kind kind) {
  if (kind == ModelAttribute::Kind::Bool) return v != 0 ? "true" : "false";
  std::ostringstream s;
  s.precision(17);
  if (kind == ModelAttribute::Kind::Int)
    s << static_cast<int64_t>(v);
  else
    s << v;
  return s.str();
}

// eos ids of a Hugging Face folder: generation_config.json's (what transformers' generate uses),
// else config.json's.
std::vector<int64_t> folder_eos_ids(const fs::path& dir) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    std::ifstream in(dir / name);
    if (!in) continue;
    try {
      const std::vector<int64_t> ids = token_ids_field(nlohmann::json::parse(in), "eos_token_id");
      if (!ids.empty()) return ids;
    } catch (const nlohmann::json::exception&) {
      TETRA_FAIL(Checkpoint, (dir / name).string(), ": not valid JSON");
    }
  }
  return {};
}

void bind_weights(GenerationModel& g, Device device, DType dtype, const std::function<void()>& fill) {
  g.params = std::make_unique<ParamSet>();
  g.params->build(g.model->params(), device, dtype, dtype, /*shards=*/1, /*full_grads=*/false);
  g.params->set_initial_values(fill);
  g.params->release_initial_values();
}

}  // namespace

std::vector<std::string> model_overrides_of(const WeightSource& source, int64_t min_length) {
  const std::optional<std::string> arch = source.arch();
  if (!arch)
    TETRA_FAIL(Checkpoint, source.path(), ": names no model family (config.json model_type, or the HDF5 attribute arch)");
  const ModelFamily& family = model_family(*arch);
  // The family's config fields, from a small model of it (the names do not depend on the shape).
  ModelArgs probe;
  probe.arch = *arch;
  probe.vocab_size = 8;
  probe.seq_len = 8;
  probe.d_model = 8;
  probe.n_layers = 1;
  probe.n_heads = 1;
  std::vector<std::string> out = {"model.arch=" + *arch};
  std::set<std::string> set;
  for (const ModelAttribute& a : family.build(probe)->config_attributes()) {
    const std::optional<double> v = source.attribute(a.name);
    if (!v || a.config_key.empty() || !set.insert(a.config_key).second) continue;  // head_dim: from d_model
    out.push_back(a.config_key + "=" + number_text(*v, a.kind));
  }
  if (!set.count("model.seq_len")) {
    const std::optional<double> positions = source.attribute("max_position_embeddings");
    out.push_back("model.seq_len=" + std::to_string(positions ? static_cast<int64_t>(*positions) : min_length));
  }
  return out;
}

GenerationModel load_generation_model(const std::string& path, Device device, DType dtype, int64_t min_length) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    TETRA_FAIL(Usage, path, ": no such file or folder (give a Hugging Face folder, a consolidated .h5 file or a ",
               "checkpoint directory RUN_DIR/checkpoints/step_N)");
  GenerationModel g;
  if (fs::is_directory(path, ec) && fs::exists(fs::path(path) / kMetaFile, ec)) {
    FullModel full = read_full_model(path);
    g.model = std::move(full.model);
    g.max_length = full.cfg.model.seq_len;
    const std::string& init = full.cfg.model.init_from;
    if (!init.empty() && fs::is_directory(init, ec)) g.folder = init;
    bind_weights(g, device, dtype, [&] {
      std::vector<Param*> params = g.model->params();
      for (size_t i = 0; i < params.size(); ++i) ops::copy(params[i]->value, full.values[i]);
    });
  } else {
    std::unique_ptr<WeightSource> source = open_weights(path);
    ModelArgs args;
    if (fs::is_directory(path, ec)) {
      // A Hugging Face folder: config.json gives the shape as model.init_from reads it (rope scaling,
      // head_dim, windows included); the context is the model's own limit.
      args = hf_shape(path).args;
      if (args.seq_len == 0) {
        const std::optional<double> positions = source->attribute("max_position_embeddings");
        args.seq_len = positions ? static_cast<int64_t>(*positions) : min_length;
      }
      // Mistral: within its window, band attention is full causal attention.
      if (args.sliding_window > 0) args.seq_len = std::min(args.seq_len, args.sliding_window);
      g.folder = path;
    } else {
      // Only the model section matters; the training keys every config needs are placeholders.
      const Config cfg = parse_config("model: {}\ntrain: {steps: 1, global_batch: 1}\n", path + " (its config)",
                                      model_overrides_of(*source, min_length));
      args = model_args(cfg);
    }
    g.model = model_family(args.arch).build(args);
    g.max_length = args.seq_len;
    bind_weights(g, device, dtype, [&] {
      for (const std::string& note : load_weights(*source, *g.model).notes)
        std::fprintf(stderr, "tetra: note: %s: %s\n", path.c_str(), note.c_str());
    });
  }
  if (!g.folder.empty()) g.eos_ids = folder_eos_ids(g.folder);
  return g;
}

}  // namespace tetra::launch
