#include "runtime/stream.h"

#include <chrono>
#include <map>
#include <mutex>

#include "runtime/error.h"
#ifdef TETRA_WITH_CUDA
#include "runtime/cuda/cuda_check.h"
#endif

namespace tetra {

struct Stream::Impl {
#ifdef TETRA_WITH_CUDA
  cudaStream_t stream = nullptr;
  bool owned = false;
  ~Impl() {
    if (owned && stream) cudaStreamDestroy(stream);
  }
#endif
};

struct Event::Impl {
  std::chrono::steady_clock::time_point host_time;
#ifdef TETRA_WITH_CUDA
  cudaEvent_t event = nullptr;
  ~Impl() {
    if (event) cudaEventDestroy(event);
  }
#endif
};

Stream Stream::create(Device device, int priority) {
  Stream s;
  s.device_ = device;
  if (device.is_cpu()) return s;
#ifdef TETRA_WITH_CUDA
  s.impl_ = std::make_shared<Impl>();
  TETRA_CUDA_CHECK(cudaSetDevice(device.index));
  TETRA_CUDA_CHECK(cudaStreamCreateWithPriority(&s.impl_->stream, cudaStreamNonBlocking, priority));
  s.impl_->owned = true;
  return s;
#else
  TETRA_FAIL(Device, "cannot create a stream on ", device.str(), ": tetra was built without CUDA");
#endif
}

void* Stream::handle() const {
#ifdef TETRA_WITH_CUDA
  return impl_ ? static_cast<void*>(impl_->stream) : nullptr;
#else
  return nullptr;
#endif
}

void Stream::synchronize() const {
#ifdef TETRA_WITH_CUDA
  if (device_.is_cuda()) TETRA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle())));
#endif
}

namespace {
// Per thread, per CUDA device: the current stream. Missing entries mean the device's main stream.
thread_local std::map<int, Stream> t_current;
std::map<int, Stream>& main_streams() {
  static std::map<int, Stream> m;
  return m;
}
}  // namespace

Stream current_stream(Device device) {
  if (device.is_cpu()) return Stream();
  auto it = t_current.find(device.index);
  if (it != t_current.end()) return it->second;
  // Each device gets one non-blocking main stream, made on first use (by the thread that runs compute).
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto& m = main_streams();
  auto jt = m.find(device.index);
  if (jt == m.end()) jt = m.emplace(device.index, Stream::create(device)).first;
  return jt->second;
}

StreamGuard::StreamGuard(const Stream& s) : previous_(current_stream(s.device())) {
  if (s.device().is_cuda()) t_current[s.device().index] = s;
}

StreamGuard::~StreamGuard() {
  if (previous_.device().is_cuda()) t_current[previous_.device().index] = previous_;
}

Event::Event(Device device) : device_(device), impl_(std::make_shared<Impl>()) {
#ifdef TETRA_WITH_CUDA
  if (device.is_cuda()) {
    TETRA_CUDA_CHECK(cudaSetDevice(device.index));
    TETRA_CUDA_CHECK(cudaEventCreate(&impl_->event));
  }
#endif
}

void Event::record(const Stream& s) {
  TETRA_CHECK(s.device() == device_, "event on ", device_.str(), " recorded on a stream of ", s.device().str());
  impl_->host_time = std::chrono::steady_clock::now();
  recorded_ = true;
#ifdef TETRA_WITH_CUDA
  if (device_.is_cuda()) TETRA_CUDA_CHECK(cudaEventRecord(impl_->event, static_cast<cudaStream_t>(s.handle())));
#endif
}

void Event::record_timing(const Stream& s) {
#ifdef TETRA_WITH_CUDA
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
#endif
  record(s);
}

void Event::block(const Stream& s) const {
#ifdef TETRA_WITH_CUDA
  if (device_.is_cuda() && recorded_)
    TETRA_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.handle()), impl_->event, 0));
#else
  (void)s;
#endif
}

void Event::synchronize() const {
#ifdef TETRA_WITH_CUDA
  if (device_.is_cuda() && recorded_) TETRA_CUDA_CHECK(cudaEventSynchronize(impl_->event));
#endif
}

bool Event::query() const {
#ifdef TETRA_WITH_CUDA
  if (device_.is_cuda() && recorded_) {
    cudaError_t e = cudaEventQuery(impl_->event);
    if (e == cudaErrorNotReady) return false;
    TETRA_CUDA_CHECK(e);
  }
#endif
  return true;
}

float Event::elapsed_ms(const Event& start) const {
  TETRA_CHECK(recorded_ && start.recorded_, "elapsed_ms on an event that was never recorded");
#ifdef TETRA_WITH_CUDA
  if (device_.is_cuda()) {
    float ms = 0;
    synchronize();
    TETRA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.impl_->event, impl_->event));
    return ms;
  }
#endif
  return std::chrono::duration<float, std::milli>(impl_->host_time - start.impl_->host_time).count();
}

void device_synchronize(Device device) {
#ifdef TETRA_WITH_CUDA
  if (device.is_cuda()) {
    TETRA_CUDA_CHECK(cudaSetDevice(device.index));
    TETRA_CUDA_CHECK(cudaDeviceSynchronize());
  }
#else
  (void)device;
#endif
}

}  // namespace tetra
