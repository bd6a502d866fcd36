// Tokenizer: text bytes -> token ids, and ids back to text for `tetra data inspect` and generation.
// `tetra data prepare --tokenizer SPEC` picks one through make_tokenizer: "byte", a Hugging Face
// tokenizer.json, or a SentencePiece .model.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tetra::data {

// What a tokenizer's own files say about document boundaries (tokenizer_config.json beside a
// tokenizer.json, or the SentencePiece model's ids): the token strings, not ids.
struct DocumentTokens {
  std::optional<std::string> eos;  // "<|endoftext|>", "<|end_of_text|>", "</s>", ...
  std::optional<std::string> bos;  // set only where the config adds it to every sequence
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;      // stored as the dataset's `tokenizer` attribute
  virtual int64_t vocab_size() const = 0;    // ids are in [0, vocab_size)
  // Appends the ids of `text` to `out`; adds no begin/end tokens. A tokenizer.json's added and
  // special tokens written in the text become their ids, as Hugging Face's encode(text,
  // add_special_tokens=False) does with its default split_special_tokens=False. Thread-safe:
  // several threads may encode with one const Tokenizer at once.
  virtual void encode(std::string_view text, std::vector<uint32_t>& out) const = 0;
  // The text of `ids` as UTF-8 (invalid sequences as U+FFFD, as Hugging Face's decode).
  virtual std::string decode(const int32_t* ids, int64_t n) const = 0;
  // The text of `ids`, with non-printable bytes escaped (\n, \t, \xNN) so it fits on one line.
  virtual std::string decode_escaped(const int32_t* ids, int64_t n) const = 0;
  // The id of `token` when it is a single entry of the vocabulary (special and added tokens too).
  virtual std::optional<uint32_t> token_id(std::string_view token) const = 0;
  // End- and begin-of-document tokens named by the tokenizer's files; none for "byte".
  virtual DocumentTokens document_tokens() const { return {}; }
  // Hex sha256 of the file the tokenizer was read from; empty for built-in tokenizers.
  virtual std::string file_sha256() const { return {}; }
};

// The tokenizer `spec` names: "byte", a path to a tokenizer.json or to a SentencePiece .model, or a
// folder holding tokenizer.json (taken first) or tokenizer.model. Throws a Usage error listing the
// accepted forms otherwise, and a Data error naming the file and the part for a file it cannot read
// exactly.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

}  // namespace tetra::data
