// `tetra data prepare` and `tetra data inspect` (docs/data.md).
#pragma once
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace tetra::data {

class Tokenizer;

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and globs, read in the order given (each glob's matches by name)
  std::string tokenizer = "byte";   // make_tokenizer's spec: "byte" (vocab 256), a tokenizer.json, a .model
  std::string out;                  // HDF5 file, or the Megatron prefix with out_format "megatron"
  std::string format = "text";      // "text": a file is one document; "jsonl": one JSON object per line
  std::string field = "text";       // the JSONL member holding the text
  int workers = 0;                  // tokenizing threads; 0: the machine's cores
  std::optional<std::string> eos{};  // unset: the tokenizer's own; "none": no end-of-document token
  std::optional<std::string> bos{};  // unset: the tokenizer's own where its config adds one; "none"
  std::string out_format = "hdf5";  // "hdf5" or "megatron"
};

// Tokenizes the inputs with options.tokenizer and writes the dataset atomically (temporary files,
// then renames); a bad input or option leaves no output behind.
void prepare_dataset(const PrepareOptions& options, std::ostream& log);
// The same with a given tokenizer (options.tokenizer is not read).
void prepare_dataset(const PrepareOptions& options, const Tokenizer& tokenizer, std::ostream& log);

// Prints format, token count, dtype, vocab size, tokenizer, documents, the ids used (distinct, max:
// reads every token) and the first tokens; decodes the start of the first document with
// `tokenizer` (a make_tokenizer spec), or with the file's own tokenizer when it is "byte".
void inspect_dataset(const std::string& path, std::ostream& out, const std::string& tokenizer = "");

}  // namespace tetra::data
