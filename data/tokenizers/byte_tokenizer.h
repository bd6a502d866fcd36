// Byte tokenizer: one token per byte, id = byte value (vocab 256). Lossless for any input,
// needs no vocabulary file: what the tiny configs and the tests train on.
#pragma once
#include "data/tokenizers/tokenizer.h"

namespace tetra::data {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;
  std::string name() const override { return "byte"; }
  int64_t vocab_size() const override { return kVocabSize; }
  void encode(std::string_view text, std::vector<uint32_t>& out) const override;
  // The bytes themselves; ids outside [0, 256) are skipped.
  std::string decode(const int32_t* ids, int64_t n) const override;
  // A one-byte string is its own id; there are no special tokens.
  std::optional<uint32_t> token_id(std::string_view token) const override;
  // Printable ASCII as is, backslash as "\\", \n \t \r, anything else (and ids >= 256) as \xNN / <id>.
  std::string decode_escaped(const int32_t* ids, int64_t n) const override;
};

}  // namespace tetra::data
