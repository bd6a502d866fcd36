#include "runtime/tensor.h"

#include <sstream>

namespace tetra {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    TETRA_CHECK(d >= 0, "negative dimension in shape ", shape_str(s));
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

Storage::Storage(void* data, size_t bytes, Device device, void (*release)(void*, size_t, Device))
    : data_(data), bytes_(bytes), device_(device), release_(release) {}

Storage::~Storage() {
  if (release_ && data_) release_(data_, bytes_, device_);
}

std::shared_ptr<Storage> borrow_storage(void* data, size_t bytes, Device device) {
  return std::make_shared<Storage>(data, bytes, device, nullptr);
}

Tensor Tensor::on_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype) {
  TETRA_CHECK(storage, "Tensor::on_storage: no storage");
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  TETRA_CHECK(t.nbytes() <= storage->bytes(), "Tensor::on_storage: ", dtype_name(dtype), shape_str(shape), " needs ",
              t.nbytes(), " bytes, the storage holds ", storage->bytes());
  t.storage_ = std::move(storage);
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = allocate_storage(t.nbytes(), device);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  Tensor t = empty(shape, DType::F32);
  TETRA_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: ", values.size(),
              " values for shape ", shape_str(shape));
  std::memcpy(t.data_ptr(), values.data(), t.nbytes());
  return t;
}

Tensor Tensor::from_vector(const std::vector<int32_t>& values, const Shape& shape) {
  Tensor t = empty(shape, DType::I32);
  TETRA_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: ", values.size(),
              " values for shape ", shape_str(shape));
  std::memcpy(t.data_ptr(), values.data(), t.nbytes());
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  int j = i < 0 ? i + n : i;
  TETRA_CHECK(j >= 0 && j < n, "dim ", i, " out of range for ", describe());
  return shape_[j];
}

void* Tensor::data_ptr() const {
  TETRA_CHECK(defined(), "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_;
}

void Tensor::check_access(DType want) const {
  TETRA_CHECK(defined(), "access to an undefined tensor");
  TETRA_CHECK(dtype_ == want, "tensor is ", dtype_name(dtype_), ", accessed as ", dtype_name(want));
}

Tensor Tensor::view(const Shape& shape) const {
  TETRA_CHECK(shape_numel(shape) == numel_, "view ", shape_str(shape), " of ", describe());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  TETRA_CHECK(ndim() >= 1 && start >= 0 && length >= 0 && start + length <= shape_[0], "narrow(", start, ", ",
              length, ") of ", describe());
  Tensor t = *this;
  int64_t row = numel_ / (shape_[0] ? shape_[0] : 1);
  t.offset_ += static_cast<size_t>(start * row) * dtype_size(dtype_);
  t.shape_[0] = length;
  t.numel_ = row * length;
  return t;
}

Tensor Tensor::slice_flat(int64_t offset, const Shape& shape) const {
  int64_t n = shape_numel(shape);
  TETRA_CHECK(offset >= 0 && offset + n <= numel_, "slice_flat(", offset, ", ", shape_str(shape), ") of ",
              describe());
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(offset) * dtype_size(dtype_);
  t.shape_ = shape;
  t.numel_ = n;
  return t;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device().str();
}

void check_shape(const char* op, const char* what, const Tensor& t, const Shape& want) {
  if (!t.defined() || t.shape() != want)
    TETRA_FAIL(Internal, op, ": ", what, " must be ", shape_str(want), ", got ", t.describe());
}

void check_last_dim(const char* op, const char* what, const Tensor& t, int64_t features) {
  if (!t.defined() || t.ndim() < 1 || t.dim(-1) != features)
    TETRA_FAIL(Internal, op, ": ", what, " must be [..., ", features, "], got ", t.describe());
}

void check_dtype(const char* op, const char* what, const Tensor& t, DType want) {
  if (!t.defined() || t.dtype() != want)
    TETRA_FAIL(Internal, op, ": ", what, " must be ", dtype_name(want), ", got ", t.describe());
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t || !t->defined()) continue;
    if (!first) first = t;
    else if (!(t->device() == first->device()))
      TETRA_FAIL(Internal, op, ": tensors on different devices: ", first->describe(), " and ", t->describe());
  }
}

namespace {
bool share_memory(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const int64_t a0 = a.storage_offset_bytes(), b0 = b.storage_offset_bytes();
  return a0 < b0 + static_cast<int64_t>(b.nbytes()) && b0 < a0 + static_cast<int64_t>(a.nbytes());
}
}  // namespace

void check_same_or_disjoint(const char* op, const char* what, const Tensor& out, const Tensor& in) {
  if (out.storage() == in.storage() && out.storage_offset_bytes() == in.storage_offset_bytes() &&
      out.nbytes() == in.nbytes())
    return;
  if (share_memory(out, in))
    TETRA_FAIL(Internal, op, ": ", what, " ", in.describe(), " partly overlaps y ", out.describe(),
               "; pass y itself as the ", what, " (in place) or a separate tensor");
}

void check_disjoint(const char* op, const char* what, const Tensor& out, const Tensor& in) {
  if (share_memory(out, in))
    TETRA_FAIL(Internal, op, ": ", what, " ", in.describe(), " shares memory with the output ", out.describe());
}

Shape leading_shape(const Tensor& t) {
  if (t.ndim() == 0) return {};
  return Shape(t.shape().begin(), t.shape().end() - 1);
}

int64_t rows_of(const Tensor& t) { return shape_numel(leading_shape(t)); }

Shape with_last(Shape lead, int64_t last) {
  lead.push_back(last);
  return lead;
}

}  // namespace tetra
