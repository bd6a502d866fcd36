// Pieces of device work over a device's side streams (runtime/stream_fanout.h).
#include "runtime/stream_fanout.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "runtime/error.h"
#include "runtime/stream.h"

namespace tetra {

namespace {

// A device's side streams and the events of its fork and joins, made on first use and kept.
struct FanoutLanes {
  explicit FanoutLanes(Device device) : fork(device) {
    for (int k = 0; k < kMaxFanoutWays - 1; ++k) {
      side[k] = Stream::create(device);
      join[k] = Event(device);
    }
  }
  Stream side[kMaxFanoutWays - 1];
  Event fork;
  Event join[kMaxFanoutWays - 1];
  std::atomic<bool> busy{false};  // a fan-out is issuing on these lanes
};

FanoutLanes& lanes_of(Device device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<FanoutLanes>> lanes;
  std::lock_guard<std::mutex> lock(mu);
  auto& entry = lanes[device.index];
  if (!entry) entry = std::make_unique<FanoutLanes>(device);
  return *entry;
}

// Issues the pieces over `ways` lanes; returns the first exception a piece threw (the pieces after
// it are not issued).
std::exception_ptr issue_pieces(FanoutLanes& l, int ways, std::span<const DevicePiece> pieces) {
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int lane = static_cast<int>(i % static_cast<size_t>(ways));
    try {
      std::optional<StreamGuard> on_side;
      if (lane > 0) on_side.emplace(l.side[lane - 1]);
      pieces[i]();
    } catch (...) {
      return std::current_exception();
    }
  }
  return nullptr;
}

}  // namespace

void run_in_order(std::span<const DevicePiece> pieces) {
  for (const DevicePiece& piece : pieces) piece();
}

void run_fanned_out(Device device, int ways, std::span<const DevicePiece> pieces) {
  TETRA_CHECK(ways >= 1, "run_fanned_out needs at least one lane, got ", ways);
  ways = std::min({ways, kMaxFanoutWays, static_cast<int>(pieces.size())});
  if (device.is_cpu() || ways <= 1) return run_in_order(pieces);
  FanoutLanes& l = lanes_of(device);
  bool expected = false;
  if (!l.busy.compare_exchange_strong(expected, true)) return run_in_order(pieces);  // nested or contended
  struct Release {
    std::atomic<bool>& busy;
    ~Release() { busy.store(false); }
  } release{l.busy};

  const Stream home = current_stream(device);
  l.fork.record(home);
  for (int k = 0; k + 1 < ways; ++k) l.fork.block(l.side[k]);
  std::exception_ptr failure = issue_pieces(l, ways, pieces);
  for (int k = 0; k + 1 < ways; ++k) {
    l.join[k].record(l.side[k]);
    l.join[k].block(home);
  }
  if (failure) std::rethrow_exception(failure);
}

int weight_grad_ways_from(const char* value) {
  if (!value || !*value) return 1;
  const std::string v(value);
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (!std::isdigit(static_cast<unsigned char>(v[0])) || *end != '\0' || n < 1 || n > kMaxFanoutWays)
    TETRA_FAIL(Config, "TETRA_WGRAD_STREAMS='", v, "' is not a number of streams: use 1 to ", kMaxFanoutWays,
               " (1, the default, runs the weight gradients one after another on the compute stream)");
  return static_cast<int>(n);
}

int weight_grad_ways() {
  static const int ways = weight_grad_ways_from(std::getenv("TETRA_WGRAD_STREAMS"));
  return ways;
}

}  // namespace tetra
