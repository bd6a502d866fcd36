#include "launch/checkpoint/snapshot.h"

#include <algorithm>
#include <iostream>
#include <string>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/ops.h"
#include "runtime/stream.h"

namespace tetra::launch {

HostSnapshot::~HostSnapshot() { release(); }

void HostSnapshot::release() {
  if (pinned_ && buffer_.defined()) cuda::unregister_host(buffer_.data_ptr());
  pinned_ = false;
  buffer_ = Tensor();
}

std::vector<StatePiece> HostSnapshot::take(const std::vector<StatePiece>& pieces) {
  int64_t total = 0;
  bool on_device = false;
  for (const StatePiece& p : pieces) {
    total += 3 * (p.end - p.begin);
    for (const Tensor* t : {&p.master, &p.exp_avg, &p.exp_avg_sq}) on_device |= !t->device().is_cpu();
  }
  if (!buffer_.defined() || buffer_.numel() < total) {
    release();
    buffer_ = Tensor::empty({std::max<int64_t>(total, 1)}, DType::F32);
  }
  if (on_device && !pinned_) {
    const std::string why = cuda::register_host(buffer_.data_ptr(), buffer_.nbytes());
    if (why.empty()) {
      pinned_ = true;
    } else {
      std::cerr << "tetra: warning: could not pin " << buffer_.nbytes() / (1 << 20)
                << " MiB of host memory for checkpoint snapshots (" << why << "); copies will be slower\n";
    }
  }
  std::vector<StatePiece> out;
  out.reserve(pieces.size());
  int64_t off = 0;
  for (const StatePiece& p : pieces) {
    const int64_t n = p.end - p.begin;
    StatePiece h{.name = p.name, .full_shape = p.full_shape, .box = p.box, .begin = p.begin, .end = p.end};
    Tensor* dst[3] = {&h.master, &h.exp_avg, &h.exp_avg_sq};
    const Tensor* src[3] = {&p.master, &p.exp_avg, &p.exp_avg_sq};
    for (int k = 0; k < 3; ++k) {
      *dst[k] = buffer_.slice_flat(off, {n});
      off += n;
      ops::copy(*dst[k], src[k]->view({n}));
    }
    out.push_back(std::move(h));
  }
  // Device-to-host copies into pinned memory may be asynchronous: the snapshot is complete only
  // when they are.
  for (const StatePiece& p : pieces)
    if (!p.master.device().is_cpu()) {
      device_synchronize(p.master.device());  // one device per rank: once is enough
      break;
    }
  return out;
}

}  // namespace tetra::launch
