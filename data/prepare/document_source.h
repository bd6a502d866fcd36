// The documents of `tetra data prepare`'s inputs, in order, in batches: a plain text file is one
// document; a JSONL file holds one JSON object per line (the line is handed on unparsed, so that
// workers parse it in parallel). Inputs stream through InputStream: memory holds one batch and, for
// text files, one whole file (a document is tokenized in one piece).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/prepare/input_stream.h"

namespace tetra::data {

enum class InputFormat { Text, Jsonl };

struct RawDocument {
  std::string text;  // the file's bytes (text) or one line without its newline (jsonl)
  int file = 0;      // index into the source's files
  int64_t line = 0;  // 1-based line of a JSONL document; 0 for text
};

class DocumentSource {
 public:
  DocumentSource(std::vector<std::string> files, InputFormat format);

  // Fills `out` (cleared first) with the next documents, at least one and about `target_bytes` of
  // text; returns false when every input is exhausted (out is then empty).
  bool next_batch(std::vector<RawDocument>& out, size_t target_bytes);

  const std::vector<std::string>& files() const { return files_; }
  uint64_t bytes_read() const { return bytes_; }  // decompressed bytes so far

 private:
  bool open_next();
  bool next_line(std::string& line);  // false at the end of the current file
  void read_whole(std::string& text);

  std::vector<std::string> files_;
  InputFormat format_;
  int current_ = -1;
  std::unique_ptr<InputStream> in_;
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;
  int64_t line_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace tetra::data
