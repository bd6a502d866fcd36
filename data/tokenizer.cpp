#include "data/tokenizer.h"

#include "data/byte_tokenizer.h"
#include "runtime/error.h"

namespace tetra::data {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  TETRA_FAIL(Usage, "unknown tokenizer '", spec, "'; available: byte");
}

}  // namespace tetra::data
