// HDF5 token dataset: 1-D `/tokens` of uint16 or uint32 (any byte order, any layout HDF5 can
// read), attributes `vocab_size` (integer) and `tokenizer` (string), optional `/doc_offsets` (int64).
// The file stays open for the object's lifetime; a read selects a hyperslab of `/tokens` and lets
// HDF5 widen it straight into the caller's int32 buffer (no staging copy).
#pragma once
#include "data/hdf5_handle.h"
#include "data/token_dataset.h"

namespace tetra::data {

class Hdf5Dataset final : public TokenDataset {
 public:
  explicit Hdf5Dataset(const std::string& path);
  std::string format() const override { return "hdf5"; }
  int64_t num_documents() const override { return num_docs_; }
  std::vector<int64_t> doc_offsets() override;

 protected:
  void read_ids(int64_t offset, int64_t count, int32_t* out) override;

 private:
  void open_tokens();
  void read_attributes();
  void open_doc_offsets();
  void find_contiguous_offset();

  H5Handle file_;
  H5Handle tokens_;
  H5Handle file_space_;                // dataspace of /tokens, reused for every hyperslab selection
  hid_t mem_type_ = H5I_INVALID_HID;   // predefined native type (never closed): see read_ids
  int64_t num_docs_ = 0;
};

}  // namespace tetra::data
