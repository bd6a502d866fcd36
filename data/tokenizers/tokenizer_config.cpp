#include "data/tokenizers/tokenizer_config.h"

#include <filesystem>

#include "data/tokenizers/hf_json.h"
#include "data/tokenizers/sha256.h"
#include "runtime/error.h"

namespace tetra::data::tok {
namespace {

std::optional<std::string> token_entry(const Json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const Json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;  // null: the tokenizer has none
}

}  // namespace

DocumentTokens read_tokenizer_config(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return {};
  const Json config = Json::parse(read_file_bytes(path.string()), nullptr, false);
  if (config.is_discarded() || !config.is_object()) TETRA_FAIL(Data, path.string(), " is not a JSON object");
  DocumentTokens tokens;
  tokens.eos = token_entry(config, "eos_token");
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean() && config["add_bos_token"].get<bool>())
    tokens.bos = token_entry(config, "bos_token");
  return tokens;
}

}  // namespace tetra::data::tok
