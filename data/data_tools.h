// `tetra data prepare` and `tetra data inspect`.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace tetra::data {

struct PrepareOptions {
  std::vector<std::string> inputs;  // text files, concatenated in order (each one document)
  std::string tokenizer = "byte";   // make_tokenizer's spec: "byte" (vocab 256), a tokenizer.json, a .model
  std::string out;                  // HDF5 file to write (contiguous, uncompressed /tokens)
};

// Tokenizes the inputs and writes the dataset atomically (temp file, then rename).
void prepare_dataset(const PrepareOptions& options, std::ostream& log);
// Prints format, token count, dtype, vocab size, tokenizer, documents and the first tokens.
void inspect_dataset(const std::string& path, std::ostream& out);

}  // namespace tetra::data
