#include "runtime/counts_readback.h"

#include <cstring>

#include "runtime/error.h"
#ifdef TETRA_WITH_CUDA
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#endif

namespace tetra {

CountsReadback::CountsReadback(Device device, int64_t capacity) : device_(device), capacity_(capacity), done_(device) {
  TETRA_CHECK(capacity > 0, "CountsReadback of ", capacity, " values");
#ifdef TETRA_WITH_CUDA
  if (device.is_cuda()) {
    const size_t bytes = static_cast<size_t>(capacity) * sizeof(int32_t);
    host_ = static_cast<int32_t*>(cuda::allocate_pinned(bytes));
    std::memset(host_, 0, bytes);
    return;
  }
#endif
  host_ = new int32_t[static_cast<size_t>(capacity)]();
}

CountsReadback::~CountsReadback() {
#ifdef TETRA_WITH_CUDA
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
#endif
  delete[] host_;
}

void CountsReadback::copy_from(std::initializer_list<const Tensor*> srcs) {
  int64_t total = 0;
  for (const Tensor* t : srcs) {
    TETRA_CHECK(t != nullptr && t->defined() && t->dtype() == DType::I32 && t->device() == device_,
                "CountsReadback::copy_from: want int32 tensors on ", device_.str(), ", got ",
                t && t->defined() ? t->describe() : std::string("none"));
    total += t->numel();
  }
  TETRA_CHECK(total <= capacity_, "CountsReadback::copy_from: ", total, " values exceed the capacity of ", capacity_);
#ifdef TETRA_WITH_CUDA
  if (device_.is_cuda()) {
    if (pending_) wait();  // the pinned buffer is about to be overwritten
    const Stream s = current_stream(device_);
    int64_t at = 0;
    for (const Tensor* t : srcs) {
      if (t->numel() > 0)
        TETRA_CUDA_CHECK(cudaMemcpyAsync(host_ + at, t->data_ptr(), t->nbytes(), cudaMemcpyDeviceToHost,
                                         static_cast<cudaStream_t>(s.handle())));
      at += t->numel();
    }
    done_.record(s);
    pending_ = true;
    copied_ = total;
    return;
  }
#endif
  int64_t at = 0;
  for (const Tensor* t : srcs) {
    if (t->numel() > 0) std::memcpy(host_ + at, t->data_ptr(), t->nbytes());
    at += t->numel();
  }
  copied_ = total;
}

bool CountsReadback::ready() const { return !pending_ || done_.query(); }

const int32_t* CountsReadback::wait() {
  if (pending_) {
    done_.synchronize();
    pending_ = false;
  }
  return host_;
}

}  // namespace tetra
