// The decoder of a tokenizer.json, for decode(): ByteLevel, Metaspace, and Sequence of Replace (a
// fixed string), ByteFallback, Fuse and Strip, applied to the tokens' strings as Hugging Face does.
#pragma once
#include <string>
#include <vector>

#include "data/tokenizers/hf_json.h"

namespace tetra::data::tok {

class Decoder {
 public:
  // `j` is the file's "decoder" (null: the tokens' strings joined).
  explicit Decoder(const Json& j);
  // The text of `tokens` (entries as the file writes them), valid UTF-8.
  std::string decode(std::vector<std::string> tokens) const;

 private:
  enum class Kind { ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip };
  struct Step {
    Kind kind;
    std::string from{}, to{};    // Replace; Metaspace: from = replacement
    bool strip_first = false;    // Metaspace: the first token's leading space goes
    size_t start = 0, stop = 0;  // Strip: characters `from` removed at each token's start and end
  };
  void add(const Json& j);
  std::vector<Step> steps_;
};

}  // namespace tetra::data::tok
