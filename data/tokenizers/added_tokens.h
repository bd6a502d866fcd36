// The added tokens of a tokenizer.json (special tokens such as <|endoftext|> and added words):
// found in the raw text before normalization, leftmost first and the longest where several start
// at one place, as Hugging Face's encode does with split_special_tokens=False.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizers/hf_json.h"

namespace tetra::data::tok {

class AddedTokens {
 public:
  // A piece of text: bytes [begin, end), and the added token's id, or -1 for plain text.
  struct Segment {
    size_t begin, end;
    int64_t id;
  };
  // `added` is the file's "added_tokens"; `normalizes` whether the file has a normalizer (tokens
  // matched after normalization are not supported there). Data errors name unsupported options.
  AddedTokens(const Json& added, bool normalizes);
  // The text cut at each added token (empty plain pieces left out).
  void split(std::string_view text, std::vector<Segment>& out) const;
  std::optional<uint32_t> id_of(std::string_view token) const;
  const std::string* content_of(uint32_t id) const;
  uint32_t id_limit() const { return id_limit_; }

 private:
  std::array<std::vector<std::pair<std::string, uint32_t>>, 256> by_first_byte_;  // longest first
  std::unordered_map<std::string, uint32_t> ids_;
  std::unordered_map<uint32_t, std::string> contents_;
  uint32_t id_limit_ = 0;
};

}  // namespace tetra::data::tok
