// A SentencePiece .model (Llama 2's and Mistral's tokenizer.model, T5, ...) through
// libsentencepiece: ids as SentencePiece's own Encode gives them (spm_encode --output_format=id).
#pragma once
#include <memory>
#include <string>

#include "data/tokenizers/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tetra::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path);
  ~SentencePieceTokenizer() override;
  std::string name() const override { return name_; }
  int64_t vocab_size() const override;
  // Thread-safe (SentencePieceProcessor::Encode is const and keeps no state between calls).
  void encode(std::string_view text, std::vector<uint32_t>& out) const override;
  std::string decode(const int32_t* ids, int64_t n) const override;
  std::string decode_escaped(const int32_t* ids, int64_t n) const override;
  std::optional<uint32_t> token_id(std::string_view token) const override;
  // tokenizer_config.json beside the model where present; else the model's own </s> (eos only).
  DocumentTokens document_tokens() const override { return document_; }
  std::string file_sha256() const override { return sha256_; }

 private:
  std::string name_, sha256_;
  DocumentTokens document_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace tetra::data
