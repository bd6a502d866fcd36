// TokenDataset: a read-only stream of token ids stored in a file, read as int32 at any offset.
// Formats (ARCHITECTURE.md §6, docs/data.md): HDF5 (`/tokens` uint16|uint32, attributes vocab_size
// and tokenizer, optional `/doc_offsets`), llm.c `.bin` shards (256-word int32 header; version 1
// uint16 tokens, version 7 uint32) and Megatron indexed datasets (PREFIX.idx + PREFIX.bin).
// `open` picks the format from the file's first bytes (and a Megatron index beside a .bin), not from
// its name alone. Every error names the file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace tetra::data {

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  // Opens `path` as HDF5 (by its signature), llm.c .bin (by its magic number) or a Megatron indexed
  // dataset (PREFIX, PREFIX.idx or PREFIX.bin with PREFIX.idx beside it) and validates its layout. Throws a Data error naming the file on anything unreadable or malformed.
  static std::unique_ptr<TokenDataset> open(const std::string& path);

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }                 // number of tokens
  int64_t vocab_size() const { return vocab_size_; }     // as stored in the file; 0 if unknown (.bin)
  std::string tokenizer() const { return tokenizer_; }   // e.g. "byte"; "" if unknown
  // Hex sha256 of the tokenizer's file, as `tetra data prepare` records it; "" if not recorded.
  const std::string& tokenizer_sha256() const { return tokenizer_sha256_; }
  DType token_dtype() const { return token_dtype_; }     // storage type: U16 or U32
  virtual std::string format() const = 0;                // "hdf5", "llm.c .bin (version 1)", ...
  // The file that holds the token bytes (contiguous_offset() is an offset into it): path() for
  // HDF5 and llm.c, PREFIX.bin for a Megatron dataset.
  virtual std::string data_path() const { return path_; }

  // Number of documents the file records (0 when it does not), and the start token of each,
  // ascending from 0 (empty when not recorded). Validated when read.
  virtual int64_t num_documents() const { return 0; }
  virtual std::vector<int64_t> doc_offsets() { return {}; }

  // Byte offset in the file of token 0 when the tokens lie there raw, contiguous and
  // little-endian (what a direct-to-GPU reader needs); -1 otherwise.
  int64_t contiguous_offset() const { return contiguous_offset_; }

  // Declares the vocabulary of the model that will consume the tokens. Fails if the file says it
  // was made for a larger vocabulary. From then on every read checks ids against the limit
  // (the file's vocab_size when it has one, else model_vocab).
  void check_vocab(int64_t model_vocab);
  // The exclusive upper bound reads enforce on token ids (0: only the int32 range is checked).
  int64_t id_limit() const { return id_limit_; }
  // True when id_limit() is the model's vocabulary (the file records none), for messages.
  bool limit_from_model() const { return limit_from_model_; }
  // Bytes per stored token: 2 (uint16) or 4 (uint32).
  int token_bytes() const { return token_dtype_ == DType::U16 ? 2 : 4; }

  // Reads tokens [offset, offset + count) into out[0..count) as int32. Fails naming the file if
  // the range is past the end or an id is outside the vocabulary (giving the id's token offset).
  // Not thread-safe: one reader per TokenDataset object.
  void read(int64_t offset, int64_t count, int32_t* out);

 protected:
  explicit TokenDataset(std::string path) : path_(std::move(path)) {}
  // Reads the ids of [offset, offset + count) (range already checked) into out as their uint32
  // bit patterns (an id >= 2^31 lands negative; read() rejects it and reports the unsigned value).
  // Implementations may stage through their own reusable buffers.
  virtual void read_ids(int64_t offset, int64_t count, int32_t* out) = 0;

  std::string path_;
  int64_t size_ = 0;
  int64_t vocab_size_ = 0;
  std::string tokenizer_;
  std::string tokenizer_sha256_;
  DType token_dtype_ = DType::U16;
  int64_t contiguous_offset_ = -1;
  int64_t id_limit_ = 0;  // set from vocab_size_ by subclasses, narrowed by check_vocab
  bool limit_from_model_ = false;
};

// Throws the Data error for token `id` (as stored, unsigned) found at token `offset` of the file
// at `path`, where reads enforce ids < limit (0: the int32 range). Shared by TokenDataset::read and
// the loader's readers, so every path reports a bad id the same way.
[[noreturn]] void fail_bad_token(const std::string& path, uint32_t id, int64_t offset, int64_t limit,
                                 bool limit_from_model);

}  // namespace tetra::data
