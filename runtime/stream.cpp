// Streams and events, the part both backends share: which stream is current (runtime/stream.h).
// Stream and Event themselves are the backend's: stream_cuda.cpp, or stream_stub.cpp without CUDA.
#include "runtime/stream.h"

#include <map>
#include <mutex>

namespace tetra {

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

}  // namespace tetra
