// Writers of token datasets for `tetra data prepare`: documents go in one at a time and stream to
// a temporary file beside the output (memory holds one buffer and 4-8 bytes per document, never
// the tokens), and commit() moves the finished files into place. Until commit() the outputs are
// untouched; a writer destroyed before it removes its temporary files.
//   hdf5:     OUT (/tokens uint16 or uint32, /doc_offsets int64, attributes vocab_size, tokenizer,
//             tokenizer_sha256)
//   megatron: PREFIX.bin + PREFIX.idx (megatron_dataset.h), one sequence per document, uint16
//             (dtype code 8) or int32 (code 4) tokens
// uint16 is chosen when the vocabulary has at most 65,536 ids, else 4-byte tokens.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace tetra::data {

// What the file records about the tokens' origin.
struct TokenFileInfo {
  std::string tokenizer;         // the tokenizer's name
  std::string tokenizer_sha256;  // of the tokenizer's file; "" for built-in ones
  int64_t vocab_size = 0;        // ids are < vocab_size
};

// Ids appended to a temporary file as uint16 or uint32, through a buffer.
class TokenSpill {
 public:
  TokenSpill(std::string path, int width);  // creates (truncates) path
  ~TokenSpill();                            // closes; removes the file unless released
  TokenSpill(const TokenSpill&) = delete;
  TokenSpill& operator=(const TokenSpill&) = delete;
  void append(const uint32_t* ids, int64_t n);
  void finish();   // flushes and closes (checking the close)
  void release() { keep_ = true; }  // the file was moved into place: do not remove it
  const std::string& path() const { return path_; }
  int width() const { return width_; }
  int64_t tokens() const { return tokens_; }

 private:
  void flush();
  std::string path_;
  int width_;
  std::FILE* f_ = nullptr;
  std::vector<unsigned char> buf_;
  size_t used_ = 0;
  int64_t tokens_ = 0;
  bool keep_ = false;
};

class TokenWriter {
 public:
  virtual ~TokenWriter() = default;
  // Appends one document of n ids (n >= 1).
  virtual void add_document(const uint32_t* ids, int64_t n) = 0;
  // Completes the output and moves it into place; fails (leaving no output) when it holds no token.
  virtual void commit() = 0;
  // The files commit() writes, for the summary line.
  virtual std::string describe_outputs() const = 0;
  int64_t tokens() const { return tokens_; }
  int64_t documents() const { return documents_; }
  int token_bytes() const { return width_; }

 protected:
  int64_t tokens_ = 0;
  int64_t documents_ = 0;
  int width_ = 2;
};

// `format`: "hdf5" or "megatron" (a Usage error otherwise). `out`: the HDF5 file, or the Megatron
// prefix (a trailing .bin or .idx is taken off). Checks the output directory exists.
std::unique_ptr<TokenWriter> make_token_writer(const std::string& format, const std::string& out,
                                               const TokenFileInfo& info);

// The two writers (hdf5_writer.cpp, megatron_writer.cpp) that make_token_writer picks from.
std::unique_ptr<TokenWriter> make_hdf5_writer(const std::string& out, const TokenFileInfo& info);
std::unique_ptr<TokenWriter> make_megatron_writer(const std::string& prefix, const TokenFileInfo& info);

// Renames `tmp` to `target` (atomic within one file system), or removes tmp and fails naming both.
void move_into_place(const std::string& tmp, const std::string& target);

}  // namespace tetra::data
