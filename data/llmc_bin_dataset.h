// llm.c token shard (`.bin`): a header of 256 little-endian int32 words — [0] magic 20240520,
// [1] version 1, [2] token count, the rest zero — followed by `count` uint16 tokens.
// The vocabulary is not stored (GPT-2 shards use 50257): call check_vocab with the model's.
// Reads use pread on a file descriptor kept open, so they need no seek state.
#pragma once
#include <vector>

#include "data/token_dataset.h"

namespace tetra::data {

class LlmcBinDataset final : public TokenDataset {
 public:
  static constexpr int32_t kMagic = 20240520;
  static constexpr int32_t kVersion = 1;
  static constexpr int kHeaderWords = 256;
  static constexpr int64_t kHeaderBytes = kHeaderWords * 4;

  explicit LlmcBinDataset(const std::string& path);
  ~LlmcBinDataset() override;
  std::string format() const override { return "llm.c .bin (version 1)"; }

 protected:
  void read_ids(int64_t offset, int64_t count, int32_t* out) override;

 private:
  // Reads exactly `bytes` at file offset `at` into dst, or fails naming the file.
  void pread_exact(void* dst, int64_t bytes, int64_t at, const char* what);

  int fd_ = -1;
  std::vector<uint16_t> staging_;  // reused across reads (grows to the largest read, never shrinks)
};

}  // namespace tetra::data
