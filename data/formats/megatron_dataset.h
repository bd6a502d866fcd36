// Megatron-LM indexed dataset (megatron/core/datasets/indexed_dataset.py): PREFIX.bin holds the
// tokens of every sequence back to back; PREFIX.idx describes them, little-endian:
//   9 bytes  "MMIDIDX\0\0"
//   uint64   version (1)
//   uint8    dtype code of the tokens: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
//            7 float32, 8 uint16
//   uint64   S, the sequence count;  uint64 D, the document-index count
//   int32[S] sequence lengths (tokens);  int64[S] sequence pointers (byte offsets into PREFIX.bin)
//   int64[D] document indices: 0, then the sequence count at the end of each document
//   int8[S]  sequence modes (multimodal datasets only; read past, not used)
// The tokens are read as one stream in sequence order; the pointers must be the running byte sums
// of the lengths (as Megatron's builder writes them). uint16 and int32 tokens are read raw by the
// loader (contiguous_offset 0 of PREFIX.bin); the other dtypes are converted on the host, and a value
// that is not a token id (negative, fractional, >= 2^32) fails naming its token offset.
// The index is validated in bounded chunks on open and not kept in memory.
#pragma once
#include <string>
#include <vector>

#include "data/formats/raw_file.h"
#include "data/token_dataset.h"

namespace tetra::data {

class MegatronDataset final : public TokenDataset {
 public:
  static constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
  static constexpr int64_t kHeaderBytes = 34;  // magic, version, dtype code, S, D

  // `prefix`: the dataset's path without .idx / .bin.
  explicit MegatronDataset(const std::string& prefix);
  std::string format() const override;
  std::string data_path() const override { return bin_.path(); }
  int64_t num_documents() const override { return num_docs_; }
  std::vector<int64_t> doc_offsets() override;

  // The prefix `path` names when it is a Megatron dataset (PREFIX, PREFIX.idx, or PREFIX.bin with
  // PREFIX.idx beside it), or "" when it is not one.
  static std::string prefix_of(const std::string& path);

 protected:
  void read_ids(int64_t offset, int64_t count, int32_t* out) override;

 private:
  void read_header();
  void check_sequences();
  void check_documents();

  RawFile idx_;
  RawFile bin_;
  int code_ = 0;            // dtype code
  int item_bytes_ = 0;      // bytes per stored token
  int64_t sequences_ = 0;   // S
  int64_t doc_entries_ = 0; // D (documents: D - 1)
  int64_t num_docs_ = 0;
  std::vector<unsigned char> staging_;  // converted reads (dtypes other than uint16/int32)
};

}  // namespace tetra::data
