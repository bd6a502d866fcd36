#include "data/byte_tokenizer.h"

#include <cstdio>

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
    const int32_t id = ids[i];
    if (id < 0 || id >= kVocabSize) {
      s += '<';
      s += std::to_string(id);
      s += '>';
    } else if (id == '\\') {
      s += "\\\\";
    } else if (id == '\n') {
      s += "\\n";
    } else if (id == '\t') {
      s += "\\t";
    } else if (id == '\r') {
      s += "\\r";
    } else if (id >= 0x20 && id < 0x7f) {
      s += static_cast<char>(id);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(id));
      s += buf;
    }
  }
  return s;
}

}  // namespace tetra::data
