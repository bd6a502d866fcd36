#include "runtime/host_readback.h"

#include <cstring>

#include "runtime/error.h"
#ifdef TETRA_WITH_CUDA
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#endif

namespace tetra {

HostReadback::HostReadback(Device device, int64_t count) : device_(device), count_(count), done_(device) {
  TETRA_CHECK(count > 0, "HostReadback of ", count, " values");
#ifdef TETRA_WITH_CUDA
  if (device.is_cuda()) {
    const size_t bytes = static_cast<size_t>(count) * sizeof(double);
    host_ = static_cast<double*>(cuda::allocate_pinned(bytes));
    std::memset(host_, 0, bytes);
    return;
  }
#endif
  host_ = new double[static_cast<size_t>(count)]();
}

HostReadback::~HostReadback() {
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

void HostReadback::copy_from(const Tensor& src) {
  TETRA_CHECK(src.dtype() == DType::F64 && src.numel() == count_ && src.device() == device_,
              "HostReadback::copy_from: want fp64 [", count_, "] on ", device_.str(), ", got ", src.describe());
#ifdef TETRA_WITH_CUDA
  if (device_.is_cuda()) {
    if (pending_) wait();  // the pinned buffer is about to be overwritten
    const Stream s = current_stream(device_);
    TETRA_CUDA_CHECK(cudaMemcpyAsync(host_, src.data_ptr(), static_cast<size_t>(count_) * sizeof(double),
                                     cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(s.handle())));
    done_.record(s);
    pending_ = true;
    return;
  }
#endif
  std::memcpy(host_, src.data_ptr(), static_cast<size_t>(count_) * sizeof(double));
}

bool HostReadback::ready() const { return !pending_ || done_.query(); }

const double* HostReadback::wait() {
  if (pending_) {
    done_.synchronize();
    pending_ = false;
  }
  return host_;
}

}  // namespace tetra
