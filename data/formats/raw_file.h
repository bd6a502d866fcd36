// A read-only file descriptor that closes itself, with positioned reads that either deliver every
// byte asked for or fail naming the file: the token formats whose bytes lie raw on disk (llm.c
// shards, Megatron .bin/.idx) read through it.
#pragma once
#include <cstdint>
#include <string>

namespace tetra::data {

class RawFile {
 public:
  // Opens `path` read-only; `kind` names the file in messages ("llm.c shard", "Megatron index").
  RawFile(const std::string& path, std::string kind);
  ~RawFile();
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }  // bytes, at open
  // Reads exactly `bytes` at file offset `at` into dst (thread-safe: pread), or fails naming the
  // file, `what` was read and the offset.
  void read_exact(void* dst, int64_t bytes, int64_t at, const char* what) const;

 private:
  std::string path_;
  std::string kind_;
  int fd_ = -1;
  int64_t size_ = 0;
};

}  // namespace tetra::data
