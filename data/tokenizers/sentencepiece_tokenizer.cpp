#include "data/tokenizers/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "data/tokenizers/sha256.h"
#include "data/tokenizers/tokenizer_config.h"
#include "data/tokenizers/utf8.h"
#include "runtime/error.h"

namespace tetra::data {

namespace fs = std::filesystem;

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const fs::path p(path);
  name_ = p.filename().string();
  const std::string bytes = tok::read_file_bytes(path);
  sha256_ = tok::sha256_hex(bytes);
  const auto status = sp_->LoadFromSerializedProto(bytes);
  if (!status.ok()) TETRA_FAIL(Data, path, ": not a SentencePiece model (", status.ToString(), ")");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (fs::is_regular_file(dir / "tokenizer_config.json", ec)) {
    document_ = tok::read_tokenizer_config(dir.string());
  } else if (sp_->eos_id() >= 0) {
    document_.eos = sp_->IdToPiece(sp_->eos_id());
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int64_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

void SentencePieceTokenizer::encode(std::string_view text, std::vector<uint32_t>& out) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) TETRA_FAIL(Data, "SentencePiece could not encode the text: ", status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(const int32_t* ids, int64_t n) const {
  std::vector<int> in;
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= 0 && ids[i] < sp_->GetPieceSize()) in.push_back(ids[i]);
  std::string text;
  const auto status = sp_->Decode(in, &text);
  if (!status.ok()) TETRA_FAIL(Data, "SentencePiece could not decode the ids: ", status.ToString());
  return tok::to_valid_utf8(std::move(text));
}

std::string SentencePieceTokenizer::decode_escaped(const int32_t* ids, int64_t n) const {
  return tok::escape_line(decode(ids, n));
}

std::optional<uint32_t> SentencePieceTokenizer::token_id(std::string_view token) const {
  const int id = sp_->PieceToId(token);
  if (id < 0 || sp_->IdToPiece(id) != token) return std::nullopt;  // PieceToId answers unk for strangers
  return static_cast<uint32_t>(id);
}

}  // namespace tetra::data
