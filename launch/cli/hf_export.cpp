#include "launch/cli/hf_export.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "runtime/error.h"

namespace tetra::launch {

namespace fs = std::filesystem;

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names = {"tokenizer.json", "tokenizer_config.json",
                                                 "special_tokens_map.json", "tokenizer.model"};
  return names;
}

int64_t parse_byte_size(const std::string& text, const std::string& option) {
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
  std::string unit = text.substr(end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::vector<std::pair<std::string, double>> units = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}};
  double scale = 0;
  for (const auto& [name, s] : units)
    if (unit == name) scale = s;
  double number = 0;
  try {
    size_t used = 0;
    number = end > 0 ? std::stod(text.substr(0, end), &used) : 0;
    if (used != end) scale = 0;
  } catch (const std::exception&) {
    scale = 0;
  }
  const double bytes = std::floor(number * scale);
  if (scale == 0 || !(bytes >= 1) || bytes > 9e18)
    TETRA_FAIL(Usage, option, " ", text, ": not a size (give bytes, or a number with KB, MB, GB, KiB, MiB or GiB: ",
               "5GB, 500MB, 1000000)");
  return static_cast<int64_t>(bytes);
}

std::vector<int64_t> token_ids_field(const nlohmann::json& config, const std::string& key) {
  std::vector<int64_t> ids;
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return ids;
  if (it->is_number_integer()) return {it->get<int64_t>()};
  if (it->is_array())
    for (const auto& v : *it)
      if (v.is_number_integer()) ids.push_back(v.get<int64_t>());
  return ids;
}

namespace {

std::optional<nlohmann::json> read_json_if_any(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  std::ifstream in(file);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TETRA_FAIL(Checkpoint, file.string(), ": not valid JSON (", e.what(), ")");
  }
}

// The id of a token string in tokenizer.json: its added tokens, then the model's vocabulary.
std::optional<int64_t> vocab_id(const nlohmann::json& tokenizer, const std::string& token) {
  if (auto added = tokenizer.find("added_tokens"); added != tokenizer.end() && added->is_array())
    for (const auto& t : *added)
      if (t.value("content", std::string()) == token && t.contains("id")) return t["id"].get<int64_t>();
  if (auto model = tokenizer.find("model"); model != tokenizer.end() && model->is_object())
    if (auto vocab = model->find("vocab"); vocab != model->end() && vocab->is_object())
      if (auto id = vocab->find(token); id != vocab->end() && id->is_number_integer()) return id->get<int64_t>();
  return std::nullopt;
}

// tokenizer_config.json's bos_token / eos_token (a string, or {"content": ...}) as an id.
std::vector<int64_t> tokenizer_config_id(const fs::path& dir, const std::string& key) {
  const auto config = read_json_if_any(dir / "tokenizer_config.json");
  const auto tokenizer = read_json_if_any(dir / "tokenizer.json");
  if (!config || !tokenizer || !config->contains(key)) return {};
  const nlohmann::json& v = (*config)[key];
  const std::string token = v.is_string() ? v.get<std::string>() : v.is_object() ? v.value("content", "") : "";
  if (token.empty()) return {};
  const auto id = vocab_id(*tokenizer, token);
  return id ? std::vector<int64_t>{*id} : std::vector<int64_t>{};
}

nlohmann::json ids_json(const std::vector<int64_t>& ids) {
  return ids.size() == 1 ? nlohmann::json(ids[0]) : nlohmann::json(ids);
}

}  // namespace

HfFolderExtras hf_export_extras(const std::string& init_from, const std::string& tokenizer_dir,
                                const std::string& max_shard_size, std::vector<std::string>& notes) {
  HfFolderExtras extras;
  extras.max_shard_bytes = parse_byte_size(max_shard_size, "--max-shard-size");
  std::error_code ec;
  fs::path source;
  if (!tokenizer_dir.empty()) {
    if (!fs::is_directory(tokenizer_dir, ec))
      TETRA_FAIL(Usage, "--tokenizer ", tokenizer_dir, ": not a folder (give the folder that holds tokenizer.json, ",
                 "tokenizer_config.json, ...)");
    source = tokenizer_dir;
  } else if (!init_from.empty() && fs::is_directory(init_from, ec)) {
    source = init_from;
  }
  for (const std::string& name : tokenizer_file_names())
    if (!source.empty() && fs::is_regular_file(source / name, ec)) extras.copy_files.push_back((source / name).string());
  if (!tokenizer_dir.empty() && extras.copy_files.empty())
    TETRA_FAIL(Usage, "--tokenizer ", tokenizer_dir, ": holds none of tokenizer.json, tokenizer_config.json, ",
               "special_tokens_map.json, tokenizer.model");
  if (extras.copy_files.empty())
    notes.push_back(source.empty() ? "no tokenizer files: the run did not start from a Hugging Face folder "
                                     "(model.init_from); give --tokenizer DIR to add them"
                                   : "no tokenizer files in " + source.string() + "; give --tokenizer DIR to add them");

  // bos/eos: the source's generation_config.json, its config.json, then its tokenizer's own files.
  const auto generation = source.empty() ? std::nullopt : read_json_if_any(source / "generation_config.json");
  const auto config = source.empty() ? std::nullopt : read_json_if_any(source / "config.json");
  nlohmann::json gen = generation && generation->is_object() ? *generation : nlohmann::json{{"_from_model_config", true}};
  for (const std::string key : {"bos_token_id", "eos_token_id"}) {
    std::vector<int64_t> ids = generation ? token_ids_field(*generation, key) : std::vector<int64_t>{};
    if (ids.empty() && config) ids = token_ids_field(*config, key);
    if (ids.empty() && !source.empty()) ids = tokenizer_config_id(source, key.substr(0, 3) + "_token");
    if (ids.empty()) continue;
    extras.config_fields[key] = ids_json(ids);
    if (!gen.contains(key) || gen[key].is_null()) gen[key] = ids_json(ids);
  }
  if (!extras.config_fields.contains("eos_token_id"))
    notes.push_back("no end-of-text id known (config.json, generation_config.json and tokenizer_config.json of the "
                    "source name none): generation from the folder stops only at max_new_tokens");
  extras.json_files["generation_config.json"] = gen;
  return extras;
}

}  // namespace tetra::launch
