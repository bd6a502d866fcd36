#include "data/prepare/document_source.h"

#include <cstring>

#include "runtime/error.h"

namespace tetra::data {

namespace {
constexpr size_t kBuffer = size_t{1} << 20;  // decompressed bytes read at a time
}

DocumentSource::DocumentSource(std::vector<std::string> files, InputFormat format)
    : files_(std::move(files)), format_(format), buf_(kBuffer) {}

bool DocumentSource::open_next() {
  in_.reset();
  if (current_ + 1 >= static_cast<int>(files_.size())) return false;
  ++current_;
  in_ = InputStream::open(files_[static_cast<size_t>(current_)]);
  pos_ = len_ = 0;
  line_ = 0;
  return true;
}

void DocumentSource::read_whole(std::string& text) {
  text.clear();
  for (;;) {
    const size_t got = in_->read(buf_.data(), buf_.size());
    if (got == 0) break;
    text.append(buf_.data(), got);
    bytes_ += got;
  }
  if (text.empty())
    TETRA_FAIL(Data, "input file ", in_->path(), " is empty; every input must hold at least one byte");
}

bool DocumentSource::next_line(std::string& line) {
  line.clear();
  bool any = false;
  for (;;) {
    if (pos_ == len_) {
      len_ = in_->read(buf_.data(), buf_.size());
      pos_ = 0;
      bytes_ += len_;
      if (len_ == 0) {
        if (any) ++line_;
        return any;  // a last line without its newline still counts
      }
    }
    const char* start = buf_.data() + pos_;
    const void* nl = std::memchr(start, '\n', len_ - pos_);
    const size_t take = nl ? static_cast<size_t>(static_cast<const char*>(nl) - start) : len_ - pos_;
    line.append(start, take);
    any = true;
    pos_ += take;
    if (nl) {
      ++pos_;
      ++line_;
      return true;
    }
  }
}

bool DocumentSource::next_batch(std::vector<RawDocument>& out, size_t target_bytes) {
  out.clear();
  size_t bytes = 0;
  while (bytes < target_bytes) {
    if (!in_ && !open_next()) break;
    RawDocument doc;
    doc.file = current_;
    if (format_ == InputFormat::Text) {
      read_whole(doc.text);
      in_.reset();
    } else if (!next_line(doc.text)) {
      if (line_ == 0)
        TETRA_FAIL(Data, "input file ", in_->path(), " is empty; a JSONL input holds one JSON object per line");
      in_.reset();
      continue;
    } else {
      doc.line = line_;
    }
    bytes += doc.text.size() + 1;
    out.push_back(std::move(doc));
  }
  return !out.empty();
}

}  // namespace tetra::data
