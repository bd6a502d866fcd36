// The pre-tokenizer of a tokenizer.json: splits a piece of normalized text into words that BPE
// merges within. ByteLevel (GPT-2's pattern, or none when use_regex is false), Split with the
// file's own pattern (PCRE2 with its JIT: the patterns need Unicode classes and look-ahead),
// Metaspace (SentencePiece-derived files) and Sequence of these.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tokenizers/hf_json.h"

namespace tetra::data::tok {

// Words as byte ranges [first, second) of `text`.
struct Words {
  std::string text;
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  void reset(std::string_view t) {
    text.assign(t);
    spans.assign(1, {0u, static_cast<uint32_t>(t.size())});
  }
};

class Pcre2Pattern;

class PreTokenizer {
 public:
  // `j` is the file's "pre_tokenizer" (null: the whole piece is one word).
  explicit PreTokenizer(const Json& j);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;
  // A ByteLevel step is present: the model's symbols are bytes (GPT-2's alphabet).
  bool byte_level() const { return byte_level_; }
  // Splits `piece` (valid UTF-8) into `out`. `at_start`: the piece begins the input (Metaspace's
  // prepend_scheme "first"). Safe to call from several threads at once.
  void split(std::string_view piece, bool at_start, Words& out) const;

 private:
  enum class Kind { Regex, PrefixSpace, Metaspace };
  struct Step {
    Kind kind;
    const Pcre2Pattern* regex = nullptr;
    bool remove_matches = false;  // Split behavior "Removed": the gaps between matches are the words
    std::string replacement{};    // Metaspace
    int prepend = 0;              // Metaspace: 0 never, 1 first, 2 always
    bool split = true;            // Metaspace
  };
  void add(const Json& j);
  void add_regex(const std::string& pattern, bool remove_matches);
  void apply_regex(const Step& s, Words& w, Words& scratch) const;
  void apply_rewrite(const Step& s, bool at_start, Words& w, Words& scratch) const;

  std::vector<Step> steps_;
  std::vector<std::unique_ptr<Pcre2Pattern>> patterns_;
  bool byte_level_ = false;
};

}  // namespace tetra::data::tok
