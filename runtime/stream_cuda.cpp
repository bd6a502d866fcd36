// Streams and events on the CUDA runtime (runtime/stream.h): a CUDA stream or event where the device
// is a GPU, the CPU's synchronous no-ops and host timestamps where it is the CPU.
#include "runtime/stream.h"

#include <chrono>

#include "runtime/cuda/cuda_check.h"
#include "runtime/error.h"

namespace tetra {

struct Stream::Impl {
  cudaStream_t stream = nullptr;
  bool owned = false;
  ~Impl() {
    if (owned && stream) cudaStreamDestroy(stream);
  }
};

struct Event::Impl {
  std::chrono::steady_clock::time_point host_time;
  cudaEvent_t event = nullptr;
  ~Impl() {
    if (event) cudaEventDestroy(event);
  }
};

Stream Stream::create(Device device, int priority) {
  Stream s;
  s.device_ = device;
  if (device.is_cpu()) return s;
  s.impl_ = std::make_shared<Impl>();
  TETRA_CUDA_CHECK(cudaSetDevice(device.index));
  TETRA_CUDA_CHECK(cudaStreamCreateWithPriority(&s.impl_->stream, cudaStreamNonBlocking, priority));
  s.impl_->owned = true;
  return s;
}

void* Stream::handle() const { return impl_ ? static_cast<void*>(impl_->stream) : nullptr; }

void Stream::synchronize() const {
  if (device_.is_cuda()) TETRA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle())));
}

Event::Event(Device device) : device_(device), impl_(std::make_shared<Impl>()) {
  if (device.is_cuda()) {
    TETRA_CUDA_CHECK(cudaSetDevice(device.index));
    TETRA_CUDA_CHECK(cudaEventCreate(&impl_->event));
  }
}

void Event::record(const Stream& s) {
  TETRA_CHECK(s.device() == device_, "event on ", device_.str(), " recorded on a stream of ", s.device().str());
  impl_->host_time = std::chrono::steady_clock::now();
  recorded_ = true;
  if (device_.is_cuda()) TETRA_CUDA_CHECK(cudaEventRecord(impl_->event, static_cast<cudaStream_t>(s.handle())));
}

void Event::record_timing(const Stream& s) {
  if (device_.is_cuda()) {
    TETRA_CHECK(s.device() == device_, "event on ", device_.str(), " recorded on a stream of ", s.device().str());
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    TETRA_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(s.handle()), &status));
    if (status == cudaStreamCaptureStatusActive) {
      impl_->host_time = std::chrono::steady_clock::now();
      recorded_ = true;
      TETRA_CUDA_CHECK(
          cudaEventRecordWithFlags(impl_->event, static_cast<cudaStream_t>(s.handle()), cudaEventRecordExternal));
      return;
    }
  }
  record(s);
}

void Event::block(const Stream& s) const {
  if (device_.is_cuda() && recorded_)
    TETRA_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.handle()), impl_->event, 0));
}

void Event::synchronize() const {
  if (device_.is_cuda() && recorded_) TETRA_CUDA_CHECK(cudaEventSynchronize(impl_->event));
}

bool Event::query() const {
  if (device_.is_cuda() && recorded_) {
    cudaError_t e = cudaEventQuery(impl_->event);
    if (e == cudaErrorNotReady) return false;
    TETRA_CUDA_CHECK(e);
  }
  return true;
}

float Event::elapsed_ms(const Event& start) const {
  TETRA_CHECK(recorded_ && start.recorded_, "elapsed_ms on an event that was never recorded");
  if (device_.is_cuda()) {
    float ms = 0;
    synchronize();
    TETRA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.impl_->event, impl_->event));
    return ms;
  }
  return std::chrono::duration<float, std::milli>(impl_->host_time - start.impl_->host_time).count();
}

void device_synchronize(Device device) {
  if (device.is_cuda()) {
    TETRA_CUDA_CHECK(cudaSetDevice(device.index));
    TETRA_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

}  // namespace tetra
