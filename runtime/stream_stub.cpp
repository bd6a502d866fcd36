// Streams and events where tetra is built without CUDA (runtime/stream.h): the CPU's only. A stream
// is a no-op (every op runs synchronously) and an event a host timestamp; a stream on a GPU is an
// error that says tetra was built without CUDA.
#include "runtime/stream.h"

#include <chrono>

#include "runtime/error.h"

namespace tetra {

struct Stream::Impl {};

struct Event::Impl {
  std::chrono::steady_clock::time_point host_time;
};

Stream Stream::create(Device device, int) {
  Stream s;
  s.device_ = device;
  if (device.is_cpu()) return s;
  TETRA_FAIL(Device, "cannot create a stream on ", device.str(), ": tetra was built without CUDA");
}

void* Stream::handle() const { return nullptr; }
void Stream::synchronize() const {}

Event::Event(Device device) : device_(device), impl_(std::make_shared<Impl>()) {}

void Event::record(const Stream& s) {
  TETRA_CHECK(s.device() == device_, "event on ", device_.str(), " recorded on a stream of ", s.device().str());
  impl_->host_time = std::chrono::steady_clock::now();
  recorded_ = true;
}

void Event::record_timing(const Stream& s) { record(s); }
void Event::block(const Stream&) const {}
void Event::synchronize() const {}
bool Event::query() const { return true; }

float Event::elapsed_ms(const Event& start) const {
  TETRA_CHECK(recorded_ && start.recorded_, "elapsed_ms on an event that was never recorded");
  return std::chrono::duration<float, std::milli>(impl_->host_time - start.impl_->host_time).count();
}

void device_synchronize(Device) {}

}  // namespace tetra
