// Safetensors files (Hugging Face's weight format): an 8-byte little-endian header length N, a
// JSON header of N bytes ({"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
// ..., optional "__metadata__": {string: string}}), then the raw little-endian tensors, offsets
// relative to the end of the header. The reader checks the whole header when it opens a file and
// rejects a malformed one with an error naming the file and what is wrong (header length, JSON,
// unknown dtype, shape against byte size, offsets out of range, overlapping or leaving holes).
// Host tensors only; weights convert to and from fp32.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace tetra::safetensors {

struct TensorInfo {
  std::string name;
  std::string dtype;     // as in the file: "F32", "BF16", "F16", "I64", ...
  Shape shape;
  uint64_t begin = 0;    // byte range in the data section (after the header)
  uint64_t end = 0;
};

// Bytes per element of a safetensors dtype name; 0 when the name is not a safetensors dtype.
size_t dtype_bytes(const std::string& dtype);

class Reader {
 public:
  explicit Reader(const std::string& path);  // throws Checkpoint errors for unreadable or malformed files
  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file order
  const TensorInfo* find(const std::string& name) const;              // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor as a host fp32 tensor of its shape; F32, BF16, F16 and F64 convert, other dtypes
  // are an error naming the tensor.
  Tensor read_f32(const std::string& name) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;  // 8 + header length
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: a host fp32 tensor, stored as F32 or BF16 (round to nearest even).
struct NamedTensor {
  std::string name;
  Tensor value;
};

// Writes `tensors` in the given order as `dtype` (DType::F32 or DType::BF16), with `metadata` as
// __metadata__. Written to path + ".tmp" and renamed, so a crash leaves no half file.
void write(const std::string& path, const std::vector<NamedTensor>& tensors, DType dtype,
           const std::map<std::string, std::string>& metadata = {});

}  // namespace tetra::safetensors
