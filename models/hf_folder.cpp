#include "models/hf_folder.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "models/rope_scaling.h"
#include "models/stored_tensors.h"
#include "runtime/safetensors.h"

namespace tetra {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const fs::path& file, const std::string& what) {
  std::ifstream in(file);
  if (!in) TETRA_FAIL(Checkpoint, file.string(), ": cannot read ", what, ": ", std::strerror(errno));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TETRA_FAIL(Checkpoint, file.string(), ": ", what, " is not valid JSON (", e.what(), ")");
  }
}

class HfFolderSource : public WeightSource {
 public:
  explicit HfFolderSource(const std::string& dir) : dir_(dir) {
    const fs::path d(dir);
    std::error_code ec;
    if (!fs::exists(d / "config.json", ec))
      TETRA_FAIL(Checkpoint, dir, ": not a Hugging Face model folder (no config.json)");
    config_ = read_json(d / "config.json", "config.json");
    if (!config_.is_object()) TETRA_FAIL(Checkpoint, (d / "config.json").string(), ": not a JSON object");
    const fs::path single = d / "model.safetensors", index = d / "model.safetensors.index.json";
    if (fs::exists(index, ec)) {
      const nlohmann::json j = read_json(index, "the shard index");
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        TETRA_FAIL(Checkpoint, index.string(), ": no weight_map object (tensor name → shard file)");
      std::map<std::string, size_t> shard_of_file;
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string())
          TETRA_FAIL(Checkpoint, index.string(), ": weight_map.", it.key(), " is not a file name");
        const std::string file = it.value().get<std::string>();
        if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
          TETRA_FAIL(Checkpoint, index.string(), ": weight_map.", it.key(), " names '", file,
                     "', not a file of the folder");
        auto s = shard_of_file.find(file);
        if (s == shard_of_file.end()) {
          if (!fs::exists(d / file, ec))
            TETRA_FAIL(Checkpoint, index.string(), ": shard ", file, " (of tensor ", it.key(), ") does not exist");
          s = shard_of_file.emplace(file, shards_.size()).first;
          shards_.push_back(std::make_unique<safetensors::Reader>((d / file).string()));
        }
        if (!shards_[s->second]->find(it.key()))
          TETRA_FAIL(Checkpoint, index.string(), ": tensor ", it.key(), " is not in its shard ", file);
        where_[it.key()] = s->second;
      }
    } else if (fs::exists(single, ec)) {
      shards_.push_back(std::make_unique<safetensors::Reader>(single.string()));
      for (const safetensors::TensorInfo& t : shards_[0]->tensors()) where_[t.name] = 0;
    } else {
      TETRA_FAIL(Checkpoint, dir, ": no model.safetensors or model.safetensors.index.json (tetra reads the "
                                  "safetensors format only)");
    }
  }

  std::string path() const override { return dir_; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, shard] : where_) out.push_back(name);
    return out;
  }
  bool has(const std::string& name) const override { return where_.count(name) > 0; }
  Shape shape(const std::string& name) const override { return info(name).shape; }
  Tensor read_f32(const std::string& name) const override { return reader(name).read_f32(name); }
  std::optional<double> attribute(const std::string& name) const override {
    if (name == "rope_theta") return rope_theta_from_json(config_);  // transformers 5: in rope_parameters
    auto it = config_.find(name);
    if (it == config_.end()) return std::nullopt;
    if (it->is_boolean()) return it->get<bool>() ? 1.0 : 0.0;
    if (it->is_number()) return it->get<double>();
    return std::nullopt;
  }
  std::optional<nlohmann::json> config_field(const std::string& name) const override {
    auto it = config_.find(name);
    if (it == config_.end()) return std::nullopt;
    return *it;
  }
  std::optional<std::string> arch() const override {
    auto it = config_.find("model_type");
    if (it == config_.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  }

 private:
  const safetensors::Reader& reader(const std::string& name) const {
    auto it = where_.find(name);
    if (it == where_.end()) TETRA_FAIL(Checkpoint, dir_, ": no tensor '", name, "'");
    return *shards_[it->second];
  }
  const safetensors::TensorInfo& info(const std::string& name) const { return *reader(name).find(name); }

  std::string dir_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<safetensors::Reader>> shards_;
  std::map<std::string, size_t> where_;  // tensor → shard
};

}  // namespace

std::unique_ptr<WeightSource> open_hf_folder(const std::string& dir) { return std::make_unique<HfFolderSource>(dir); }

std::vector<size_t> plan_shards(const std::vector<int64_t>& bytes, int64_t max_bytes) {
  TETRA_CHECK(max_bytes > 0, "plan_shards: max_bytes ", max_bytes);
  std::vector<size_t> shard(bytes.size());
  size_t current = 0;
  int64_t filled = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (filled > 0 && filled + bytes[i] > max_bytes) {
      ++current;
      filled = 0;
    }
    shard[i] = current;
    filled += bytes[i];
  }
  return shard;
}

namespace {

void write_json_file(const fs::path& file, const nlohmann::json& j) {
  std::ofstream out(file, std::ios::trunc);
  out << j.dump(2) << "\n";
  out.flush();
  if (!out) TETRA_FAIL(Checkpoint, "cannot write ", file.string(), ": ", std::strerror(errno));
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

// The weights into `d`: model.safetensors, or shards (tensors sorted by name, as the index lists
// them) and model.safetensors.index.json.
void write_weights(const fs::path& d, std::vector<safetensors::NamedTensor> tensors, DType dtype, int64_t max_bytes) {
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<int64_t> bytes;
  int64_t total = 0;
  for (const auto& t : tensors) {
    bytes.push_back(t.value.numel() * static_cast<int64_t>(dtype_size(dtype)));
    total += bytes.back();
  }
  const std::vector<size_t> shard = plan_shards(bytes, max_bytes);
  const size_t n = shard.empty() ? 1 : shard.back() + 1;
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  if (n == 1) {
    safetensors::write((d / "model.safetensors").string(), tensors, dtype, meta);
    return;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0, i = 0; s < n; ++s) {
    std::vector<safetensors::NamedTensor> part;
    for (; i < tensors.size() && shard[i] == s; ++i) {
      weight_map[tensors[i].name] = shard_name(s, n);
      part.push_back(std::move(tensors[i]));
    }
    safetensors::write((d / shard_name(s, n)).string(), part, dtype, meta);
  }
  write_json_file(d / "model.safetensors.index.json",
                  {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
}

void write_folder_contents(const fs::path& d, Model& model, const std::vector<Tensor>& values, DType dtype,
                           const HfFolderExtras& extras) {
  std::vector<Param*> params = model.params();
  std::vector<safetensors::NamedTensor> tensors;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& v = values[i];
    TETRA_CHECK(v.device().is_cpu() && v.dtype() == DType::F32 && v.shape() == params[i]->full_shape,
                "write_hf_folder: ", params[i]->name, " given ", v.describe());
    for (const StoredTensor& t : stored_tensors(*params[i])) tensors.push_back({t.name, to_stored(t, v)});
  }
  write_weights(d, std::move(tensors), dtype, extras.max_shard_bytes);
  nlohmann::json config = model.hf_config();
  for (auto it = extras.config_fields.begin(); it != extras.config_fields.end(); ++it)
    if (!config.contains(it.key())) config[it.key()] = it.value();
  config["torch_dtype"] = dtype == DType::BF16 ? "bfloat16" : "float32";
  write_json_file(d / "config.json", config);
  for (const auto& [name, j] : extras.json_files) write_json_file(d / name, j);
  std::error_code ec;
  for (const std::string& src : extras.copy_files) {
    fs::copy_file(src, d / fs::path(src).filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) TETRA_FAIL(Checkpoint, "cannot copy ", src, " into the folder: ", ec.message());
  }
}

}  // namespace

void write_hf_folder(const std::string& dir, Model& model, const std::vector<Tensor>& values, DType dtype,
                     const HfFolderExtras& extras) {
  TETRA_CHECK(dtype == DType::F32 || dtype == DType::BF16, "write_hf_folder: dtype ", dtype_name(dtype));
  TETRA_CHECK(values.size() == model.params().size(), "write_hf_folder: ", values.size(), " tensors for ",
              model.params().size(), " parameters");
  std::error_code ec;
  const fs::path d = fs::absolute(dir, ec).lexically_normal();
  const fs::path final_dir = d.filename().empty() ? d.parent_path() : d;
  if (fs::exists(final_dir, ec) && !(fs::is_directory(final_dir, ec) && fs::is_empty(final_dir, ec)))
    TETRA_FAIL(Checkpoint, dir, ": exists and is not an empty folder; remove it or choose another output folder");
  const fs::path tmp = final_dir.parent_path() / (std::string(".").append(final_dir.filename().string()) + ".tmp");
  fs::remove_all(tmp, ec);  // what an interrupted export left
  fs::create_directory(tmp, ec);
  if (ec) TETRA_FAIL(Checkpoint, "cannot create the folder ", tmp.string(), ": ", ec.message());
  try {
    write_folder_contents(tmp, model, values, dtype, extras);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove(final_dir, ec);  // an empty folder, or nothing
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove_all(tmp, ec);
    TETRA_FAIL(Checkpoint, "cannot rename ", tmp.string(), " to ", final_dir.string(), ": ", why);
  }
}

}  // namespace tetra
