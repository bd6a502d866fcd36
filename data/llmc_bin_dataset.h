// llm.c token shard (`.bin`, llm.c's dev/data/data_common.py): a header of 256 little-endian int32
// words — [0] magic, [1] version, [2] token count, the rest zero — followed by `count` tokens:
//   magic 20240520, version 1: uint16 tokens (GPT-2 data)
//   magic 20240801, version 7: uint32 tokens (Llama 3 data)
// The vocabulary is not stored (GPT-2 shards use 50257): call check_vocab with the model's.
// Reads use pread on a file descriptor kept open (RawFile), so they need no seek state.
#pragma once
#include <string>
#include <vector>

#include "data/formats/raw_file.h"
#include "data/token_dataset.h"

namespace tetra::data {

class LlmcBinDataset final : public TokenDataset {
 public:
  static constexpr int32_t kMagic = 20240520;    // version 1, uint16 tokens
  static constexpr int32_t kMagicV7 = 20240801;  // version 7, uint32 tokens
  static constexpr int32_t kVersion = 1;
  static constexpr int32_t kVersionV7 = 7;
  static constexpr int kHeaderWords = 256;
  static constexpr int64_t kHeaderBytes = kHeaderWords * 4;

  explicit LlmcBinDataset(const std::string& path);
  // True when the file's first int32 word is one of the two magic numbers (false when unreadable).
  static bool has_magic(const std::string& path);
  std::string format() const override { return "llm.c .bin (version " + std::to_string(version_) + ")"; }

 protected:
  void read_ids(int64_t offset, int64_t count, int32_t* out) override;

 private:
  RawFile file_;
  int32_t version_ = kVersion;
  std::vector<uint16_t> staging_;  // reused across reads (grows to the largest read, never shrinks)
};

}  // namespace tetra::data
