// The bytes of one input file of `tetra data prepare`, decompressed as they are read: `.gz`
// (gzip, through zlib; concatenated members too) and `.zst` (zstd frames, through libzstd) by their
// suffix, anything else as is. A file whose suffix promises a compression its bytes do not carry, or
// whose compressed stream is corrupt or cut short, fails naming the file.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace tetra::data {

class InputStream {
 public:
  virtual ~InputStream() = default;
  // Reads up to `n` bytes into dst; returns how many (0 only at the end of the input).
  virtual size_t read(char* dst, size_t n) = 0;
  const std::string& path() const { return path_; }

  // Opens `path` (which must be a readable regular file) by its suffix.
  static std::unique_ptr<InputStream> open(const std::string& path);

 protected:
  explicit InputStream(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// "gzip", "zstd" or "" (plain) for `path`, by its suffix.
std::string compression_of(const std::string& path);

}  // namespace tetra::data
