#include "data/tokenizers/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "data/tokenizers/added_tokens.h"
#include "data/tokenizers/bpe_model.h"
#include "data/tokenizers/decoder.h"
#include "data/tokenizers/normalizer.h"
#include "data/tokenizers/pre_tokenizer.h"
#include "data/tokenizers/sha256.h"
#include "data/tokenizers/tokenizer_config.h"
#include "data/tokenizers/utf8.h"
#include "runtime/error.h"

namespace tetra::data {

namespace fs = std::filesystem;

HfTokenizer::HfTokenizer(const std::string& path) {
  const fs::path p(path);
  name_ = p.has_parent_path() && p.parent_path().has_filename()
              ? (p.parent_path().filename() / p.filename()).string()
              : p.filename().string();
  const std::string bytes = tok::read_file_bytes(path);
  sha256_ = tok::sha256_hex(bytes);
  try {
    load(bytes);
  } catch (const Error& e) {
    // The parts' messages say "tokenizer.json: ..."; name the file the user gave instead.
    std::string msg = e.what();
    const std::string prefix = "tokenizer.json: ";
    if (msg.compare(0, prefix.size(), prefix) == 0) msg.erase(0, prefix.size());
    throw Error(e.kind(), path + ": " + msg);
  }
  document_ = tok::read_tokenizer_config(p.has_parent_path() ? p.parent_path().string() : ".");
}

HfTokenizer::~HfTokenizer() = default;

void HfTokenizer::load(const std::string& bytes) {
  const tok::Json j = tok::Json::parse(bytes, nullptr, false);
  if (j.is_discarded() || !j.is_object()) tok::malformed("is not a JSON object");
  const auto part = [&](const char* key) { return j.contains(key) ? j[key] : tok::Json(); };
  for (const char* key : {"truncation", "padding"})
    if (!part(key).is_null()) tok::unsupported(std::string("\"") + key + "\" (set it to null)");
  normalizer_ = std::make_unique<tok::Normalizer>(part("normalizer"));
  added_ = std::make_unique<tok::AddedTokens>(part("added_tokens"), !normalizer_->empty());
  pre_tokenizer_ = std::make_unique<tok::PreTokenizer>(part("pre_tokenizer"));
  model_ = std::make_unique<tok::BpeModel>(part("model"), pre_tokenizer_->byte_level());
  decoder_ = std::make_unique<tok::Decoder>(part("decoder"));
  vocab_size_ = std::max(model_->id_limit(), added_->id_limit());
}

void HfTokenizer::encode(std::string_view text, std::vector<uint32_t>& out) const {
  thread_local std::string fixed, piece;
  thread_local std::vector<tok::AddedTokens::Segment> segments;
  thread_local tok::Words words;
  if (!tok::sanitize_utf8(text, fixed)) text = fixed;
  added_->split(text, segments);
  for (const auto& s : segments) {
    if (s.id >= 0) {
      out.push_back(static_cast<uint32_t>(s.id));
      continue;
    }
    std::string_view plain = text.substr(s.begin, s.end - s.begin);
    if (!normalizer_->empty()) {
      piece.assign(plain);
      normalizer_->apply(piece);
      plain = piece;
    }
    pre_tokenizer_->split(plain, s.begin == 0, words);
    for (const auto& [b, e] : words.spans) model_->encode_word(std::string_view(words.text).substr(b, e - b), out);
  }
}

std::string HfTokenizer::decode(const int32_t* ids, int64_t n) const {
  std::vector<std::string> tokens;
  tokens.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0) continue;
    const auto id = static_cast<uint32_t>(ids[i]);
    if (const std::string* t = added_->content_of(id)) tokens.push_back(*t);
    else if (const std::string* m = model_->token_of(id)) tokens.push_back(*m);
  }
  return decoder_->decode(std::move(tokens));
}

std::string HfTokenizer::decode_escaped(const int32_t* ids, int64_t n) const { return tok::escape_line(decode(ids, n)); }

std::optional<uint32_t> HfTokenizer::token_id(std::string_view token) const {
  if (auto id = added_->id_of(token)) return id;
  return model_->id_of(token);
}

}  // namespace tetra::data
