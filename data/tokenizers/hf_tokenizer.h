// A Hugging Face tokenizer.json with a BPE model (GPT-2, Llama 3, Llama 2, Mistral, Qwen, ...):
// added tokens, normalizer, pre-tokenizer, BPE, decoder. encode() gives the ids of Hugging Face's
// encode(text, add_special_tokens=False); invalid UTF-8 is first replaced as Python's
// bytes.decode(errors="replace") does. Parts of a file it cannot reproduce exactly are Data errors
// naming the part.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizers/tokenizer.h"

namespace tetra::data {

namespace tok {
class AddedTokens;
class BpeModel;
class Decoder;
class Normalizer;
class PreTokenizer;
}  // namespace tok

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& path);
  ~HfTokenizer() override;
  std::string name() const override { return name_; }
  int64_t vocab_size() const override { return vocab_size_; }
  // Thread-safe: one const HfTokenizer serves any number of threads.
  void encode(std::string_view text, std::vector<uint32_t>& out) const override;
  // Special tokens are kept (Hugging Face's decode with skip_special_tokens=False); unknown ids skipped.
  std::string decode(const int32_t* ids, int64_t n) const override;
  std::string decode_escaped(const int32_t* ids, int64_t n) const override;
  std::optional<uint32_t> token_id(std::string_view token) const override;
  // tokenizer_config.json beside the file: eos_token, and bos_token where add_bos_token is true.
  DocumentTokens document_tokens() const override { return document_; }
  std::string file_sha256() const override { return sha256_; }

 private:
  void load(const std::string& bytes);

  std::string name_, sha256_;
  int64_t vocab_size_ = 0;
  DocumentTokens document_;
  std::unique_ptr<tok::AddedTokens> added_;
  std::unique_ptr<tok::Normalizer> normalizer_;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tok::BpeModel> model_;
  std::unique_ptr<tok::Decoder> decoder_;
};

}  // namespace tetra::data
