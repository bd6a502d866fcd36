// Tokenizer: text bytes -> token ids, and ids back to readable text for `tetra data inspect`.
// `tetra data prepare --tokenizer NAME` picks one by name through make_tokenizer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tetra::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;      // stored as the dataset's `tokenizer` attribute
  virtual int64_t vocab_size() const = 0;    // ids are in [0, vocab_size)
  // Appends the ids of `text` to `out`.
  virtual void encode(std::string_view text, std::vector<uint32_t>& out) const = 0;
  // The text of `ids`, with non-printable bytes escaped (\n, \t, \xNN) so it fits on one line.
  virtual std::string decode_escaped(const int32_t* ids, int64_t n) const = 0;
};

// The tokenizer called `name` ("byte"); throws a Usage error listing the known names otherwise.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

}  // namespace tetra::data
