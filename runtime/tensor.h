// Tensor: a typed, shaped, contiguous view into reference-counted device or host memory.
// Views (view/narrow/slice) share the storage; nothing here computes — ops live in runtime/ops.h.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace tetra {

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

// A block of memory on one device. Freed through the allocator that made it.
class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, void (*release)(void*, size_t, Device));
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  void (*release_)(void*, size_t, Device);
};

// Allocates `bytes` on `device` (CPU: 64-byte aligned; CUDA: stream-ordered caching allocator).
std::shared_ptr<Storage> allocate_storage(size_t bytes, Device device);
// Wraps memory the caller owns and keeps alive (no free on destruction).
std::shared_ptr<Storage> borrow_storage(void* data, size_t bytes, Device device);

class Tensor {
 public:
  Tensor() = default;  // undefined tensor: defined() is false

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Host tensor holding a copy of `values` (fp32), shaped `shape`.
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape);
  // A tensor over the start of `storage` (which must hold its bytes), e.g. memory a communicator
  // allocated itself.
  static Tensor on_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  int64_t storage_offset_bytes() const { return static_cast<int64_t>(offset_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* data_ptr() const;
  template <class T>
  T* data() const {
    check_access(dtype_of<T>());
    return static_cast<T*>(data_ptr());
  }
  // bf16 tensors are accessed as raw uint16_t bits on the host.
  uint16_t* bf16_bits() const {
    check_access(DType::BF16);
    return static_cast<uint16_t*>(data_ptr());
  }

  // Same memory, new shape (numel must match).
  Tensor view(const Shape& shape) const;
  // Rows [start, start+length) along dim 0.
  Tensor narrow(int64_t start, int64_t length) const;
  // Elements [offset, offset+numel(shape)) of the flattened tensor, shaped `shape`.
  Tensor slice_flat(int64_t offset, const Shape& shape) const;
  // The whole tensor as one row of numel() elements.
  Tensor flatten() const { return view({numel_}); }

  bool same_shape(const Tensor& o) const { return shape_ == o.shape_; }
  std::string describe() const;  // e.g. "bf16[16, 1024, 768] on cuda:0"

 private:
  void check_access(DType want) const;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes into storage
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
};

// Argument checks used by ops; errors name the op and the offending tensor.
void check_shape(const char* op, const char* what, const Tensor& t, const Shape& want);
void check_dtype(const char* op, const char* what, const Tensor& t, DType want);
void check_same_device(const char* op, std::initializer_list<const Tensor*> ts);
// An in-place argument must be `out` exactly or not share any of its memory: a partial overlap
// has no meaningful result (e.g. linear_forward's residual).
void check_same_or_disjoint(const char* op, const char* what, const Tensor& out, const Tensor& in);
// `in` must not share any memory with `out` (an input read after the output is written).
void check_disjoint(const char* op, const char* what, const Tensor& out, const Tensor& in);
// Fails unless t is defined with at least one dimension and its last dimension is `features`.
void check_last_dim(const char* op, const char* what, const Tensor& t, int64_t features);

// A [..., F] tensor seen as rows of F: its shape without the last dimension (the shape of per-row
// values: mean, rstd, losses, row amaxes; [] for a scalar), and the row count (their product).
Shape leading_shape(const Tensor& t);
int64_t rows_of(const Tensor& t);
// `lead` with one more trailing dimension.
Shape with_last(Shape lead, int64_t last);

}  // namespace tetra
