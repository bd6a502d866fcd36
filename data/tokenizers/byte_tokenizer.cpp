#include "data/tokenizers/byte_tokenizer.h"

#include "data/tokenizers/utf8.h"

namespace tetra::data {

void ByteTokenizer::encode(std::string_view text, std::vector<uint32_t>& out) const {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
}

std::string ByteTokenizer::decode(const int32_t* ids, int64_t n) const {
  std::string s;
  s.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= 0 && ids[i] < kVocabSize) s += static_cast<char>(ids[i]);
  return s;
}

std::optional<uint32_t> ByteTokenizer::token_id(std::string_view token) const {
  if (token.size() != 1) return std::nullopt;
  return static_cast<unsigned char>(token[0]);
}

std::string ByteTokenizer::decode_escaped(const int32_t* ids, int64_t n) const {
  std::string s;
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= kVocabSize) {
      s += '<';
      s += std::to_string(ids[i]);
      s += '>';
    } else {
      tok::append_escaped(s, static_cast<unsigned char>(ids[i]), true);
    }
  }
  return s;
}

}  // namespace tetra::data
