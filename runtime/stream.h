// Streams and events: the ordering of device work. On the CPU every op runs synchronously, so a
// stream is a no-op and an event records a host timestamp; on CUDA they wrap cudaStream_t /
// cudaEvent_t. Ops run on the calling thread's current stream of their device (see StreamGuard).
#pragma once
#include <memory>

#include "runtime/device.h"

namespace tetra {

class Stream {
 public:
  Stream() = default;  // the CPU stream
  // A new stream on `device` (CUDA: non-blocking; priority < 0 is higher priority).
  static Stream create(Device device, int priority = 0);
  Device device() const { return device_; }
  void* handle() const;  // cudaStream_t, or nullptr on the CPU
  void synchronize() const;
  bool operator==(const Stream& o) const { return device_ == o.device_ && handle() == o.handle(); }

 private:
  struct Impl;
  Device device_ = Device::cpu();
  std::shared_ptr<Impl> impl_;
};

// The stream ops issued by this thread on `device` run on (default: the device's main stream).
Stream current_stream(Device device);

// Sets the current stream of its device for this thread, for the guard's lifetime.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

class Event {
 public:
  explicit Event(Device device = Device::cpu());
  void record(const Stream& s);
  void record() { record(current_stream(device_)); }
  // A record whose time is read later (elapsed_ms). While `s` is being captured into a CUDA graph
  // it becomes an event-record node of the graph, so every replay records it again; a plain
  // record() there only orders streams inside the capture.
  void record_timing(const Stream& s);
  // Work issued to `s` after this call waits until the work recorded before this event is done.
  void block(const Stream& s) const;
  void synchronize() const;
  bool query() const;  // true once the recorded work is complete
  // Milliseconds between `start` (recorded earlier) and this event; waits for both.
  float elapsed_ms(const Event& start) const;
  bool recorded() const { return recorded_; }

 private:
  struct Impl;
  Device device_;
  bool recorded_ = false;
  std::shared_ptr<Impl> impl_;
};

// Waits until all work on every stream of `device` is done.
void device_synchronize(Device device);

}  // namespace tetra
