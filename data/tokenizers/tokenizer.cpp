#include "data/tokenizers/tokenizer.h"

#include <filesystem>

#include "data/tokenizers/byte_tokenizer.h"
#include "data/tokenizers/hf_tokenizer.h"
#include "data/tokenizers/sentencepiece_tokenizer.h"
#include "runtime/error.h"

namespace tetra::data {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  std::error_code ec;
  fs::path path(spec);
  // A folder holding a tokenizer.json (or a tokenizer.model), as the Hub lays models out.
  if (fs::is_directory(path, ec)) {
    if (fs::is_regular_file(path / "tokenizer.json", ec)) path /= "tokenizer.json";
    else if (fs::is_regular_file(path / "tokenizer.model", ec)) path /= "tokenizer.model";
  }
  const std::string ext = path.extension().string();
  if (fs::is_regular_file(path, ec) && ext == ".json") return std::make_unique<HfTokenizer>(path.string());
  if (fs::is_regular_file(path, ec) && ext == ".model") return std::make_unique<SentencePieceTokenizer>(path.string());
  if (fs::is_regular_file(path, ec))
    TETRA_FAIL(Usage, "tokenizer '", spec, "': a tokenizer file is a Hugging Face tokenizer.json (.json) or a SentencePiece model (.model)");
  TETRA_FAIL(Usage, "unknown tokenizer '", spec, "': no such file; give byte, PATH/tokenizer.json (Hugging Face) or PATH/tokenizer.model (SentencePiece)");
}

}  // namespace tetra::data
