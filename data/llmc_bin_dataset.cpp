#include "data/llmc_bin_dataset.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "runtime/error.h"

namespace tetra::data {

// The header and tokens are little-endian on disk and read without byte swapping.
static_assert(std::endian::native == std::endian::little, "llm.c shards are read on little-endian hosts only");

LlmcBinDataset::LlmcBinDataset(const std::string& path) : TokenDataset(path), file_(path, "llm.c shard") {
  const int64_t file_bytes = file_.size();
  if (file_bytes < kHeaderBytes)
    TETRA_FAIL(Data, "llm.c shard ", path, " is truncated: ", file_bytes, " bytes, shorter than its ", kHeaderBytes,
               "-byte header");
  int32_t header[kHeaderWords];
  file_.read_exact(header, kHeaderBytes, 0, "header");
  if (header[0] != kMagic && header[0] != kMagicV7)
    TETRA_FAIL(Data, "llm.c shard ", path, " has wrong magic number ", header[0], " (expected ", kMagic,
               " for uint16 tokens or ", kMagicV7, " for uint32 tokens)");
  const int32_t want_version = header[0] == kMagic ? kVersion : kVersionV7;
  if (header[1] != want_version)
    TETRA_FAIL(Data, "llm.c shard ", path, " has magic ", header[0], " with version ", header[1],
               "; llm.c writes version ", want_version, " with that magic (", kMagic, ": version ", kVersion,
               ", uint16; ", kMagicV7, ": version ", kVersionV7, ", uint32)");
  version_ = header[1];
  const int64_t width = version_ == kVersion ? 2 : 4;
  const int64_t count = header[2];
  if (count <= 0)
    TETRA_FAIL(Data, "llm.c shard ", path, " has token count ", count, " in its header; expected a positive count");
  const int64_t have = (file_bytes - kHeaderBytes) / width;
  if (count > have)
    TETRA_FAIL(Data, "llm.c shard ", path, " is truncated: its header says ", count, " tokens (",
               kHeaderBytes + width * count, " bytes) but the file has ", file_bytes, " bytes (", have,
               " tokens); re-download or re-create it");
  if (file_bytes != kHeaderBytes + width * count)
    TETRA_FAIL(Data, "llm.c shard ", path, " has ", file_bytes - kHeaderBytes - width * count,
               " bytes after the ", count, " tokens its header declares; the header or the file is corrupt");
  size_ = count;
  token_dtype_ = version_ == kVersion ? DType::U16 : DType::U32;
  vocab_size_ = 0;  // not stored in the format
  tokenizer_ = "";
  contiguous_offset_ = kHeaderBytes;
}

bool LlmcBinDataset::has_magic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  int32_t word = 0;
  const bool got = std::fread(&word, sizeof word, 1, f) == 1;
  std::fclose(f);
  return got && (word == kMagic || word == kMagicV7);
}

void LlmcBinDataset::read_ids(int64_t offset, int64_t count, int32_t* out) {
  if (version_ == kVersionV7) {  // uint32 ids land as their bit patterns (TokenDataset::read checks them)
    file_.read_exact(out, 4 * count, kHeaderBytes + 4 * offset, "tokens");
    return;
  }
  if (staging_.size() < static_cast<size_t>(count)) staging_.resize(static_cast<size_t>(count));
  file_.read_exact(staging_.data(), 2 * count, kHeaderBytes + 2 * offset, "tokens");
  for (int64_t i = 0; i < count; ++i) out[i] = staging_[static_cast<size_t>(i)];
}

}  // namespace tetra::data
