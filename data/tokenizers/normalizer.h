// The normalizer of a tokenizer.json: NFC, NFKC, NFD, NFKD (ICU), Prepend, Replace of a fixed
// string, and Sequence of these. Hugging Face normalizes each piece of text between added tokens
// on its own, so Prepend applies once per piece.
#pragma once
#include <string>
#include <vector>

#include "data/tokenizers/hf_json.h"

namespace tetra::data::tok {

class Normalizer {
 public:
  // `j` is the file's "normalizer" (null: none). Unsupported types are a Data error naming them.
  explicit Normalizer(const Json& j);
  bool empty() const { return steps_.empty(); }
  // Normalizes `text` (valid UTF-8) in place.
  void apply(std::string& text) const;

 private:
  enum class Kind { Unicode, Prepend, Replace };
  struct Step {
    Kind kind;
    const void* icu = nullptr;  // icu::Normalizer2 (a process-wide instance) for Kind::Unicode
    std::string from{}, to{};   // Prepend: to; Replace: from -> to
  };
  void add(const Json& j);
  std::vector<Step> steps_;
};

// Replaces every occurrence of `from` (non-empty) in `text` by `to`.
void replace_all(std::string& text, const std::string& from, const std::string& to);

}  // namespace tetra::data::tok
