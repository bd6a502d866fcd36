#include "runtime/host_readback.h"

#include <cstring>
#include <string>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/error.h"

namespace tetra {

namespace {
// The name errors give: what the callers know the readback as.
template <class T> const char* readback_name();
template <> const char* readback_name<int32_t>() { return "CountsReadback"; }
template <> const char* readback_name<double>() { return "HostReadback"; }
}  // namespace

template <class T>
HostReadback<T>::HostReadback(Device device, int64_t capacity) : device_(device), capacity_(capacity), done_(device) {
  TETRA_CHECK(capacity > 0, readback_name<T>(), " of ", capacity, " values");
  if (device.is_cuda()) {
    const size_t bytes = static_cast<size_t>(capacity) * sizeof(T);
    host_ = static_cast<T*>(cuda::allocate_pinned(bytes));
    std::memset(host_, 0, bytes);
    return;
  }
  host_ = new T[static_cast<size_t>(capacity)]();
}

template <class T>
HostReadback<T>::~HostReadback() {
  if (device_.is_cuda()) {
    if (pending_) {
      try {
        done_.synchronize();  // the copy must not land in freed memory
      } catch (...) {
      }
    }
    cuda::release_pinned(host_);
    return;
  }
  delete[] host_;
}

template <class T>
void HostReadback<T>::copy_from(std::initializer_list<const Tensor*> srcs) {
  int64_t total = 0;
  for (const Tensor* t : srcs) {
    TETRA_CHECK(t != nullptr && t->defined() && t->dtype() == dtype_of<T>() && t->device() == device_,
                readback_name<T>(), "::copy_from: want ", dtype_name(dtype_of<T>()), " tensors on ", device_.str(),
                ", got ", t && t->defined() ? t->describe() : std::string("none"));
    total += t->numel();
  }
  TETRA_CHECK(total <= capacity_, readback_name<T>(), "::copy_from: ", total, " values exceed the capacity of ",
              capacity_);
  if (device_.is_cuda()) {
    // A captured copy's event is recorded once, at capture: a replayed copy could never be waited for.
    TETRA_CHECK(!cuda::capturing(device_), readback_name<T>(), "::copy_from while ", device_.str(),
                "'s stream is being captured into a CUDA graph; read back outside the captured step");
    if (pending_) wait();  // the pinned buffer is about to be overwritten
    const Stream s = current_stream(device_);
    int64_t at = 0;
    for (const Tensor* t : srcs) {
      // Asynchronous, on the device's current stream s (the host buffer is pinned).
      cuda::copy_bytes(host_ + at, Device::cpu(), t->data_ptr(), device_, t->nbytes(), /*blocking=*/false);
      at += t->numel();
    }
    done_.record(s);
    pending_ = true;
    copied_ = total;
    return;
  }
  int64_t at = 0;
  for (const Tensor* t : srcs) {
    if (t->numel() > 0) std::memcpy(host_ + at, t->data_ptr(), t->nbytes());
    at += t->numel();
  }
  copied_ = total;
}

template <class T>
bool HostReadback<T>::ready() const {
  return !pending_ || done_.query();
}

template <class T>
const T* HostReadback<T>::wait() {
  if (pending_) {
    done_.synchronize();
    pending_ = false;
  }
  return host_;
}

template class HostReadback<int32_t>;
template class HostReadback<double>;

}  // namespace tetra
