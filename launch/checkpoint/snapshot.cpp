#include "launch/checkpoint/snapshot.h"

#include <algorithm>
#include <iostream>

#include "runtime/ops.h"
#include "runtime/stream.h"
#ifdef TETRA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tetra::launch {

HostSnapshot::~HostSnapshot() { release(); }

void HostSnapshot::release() {
#ifdef TETRA_WITH_CUDA
  if (pinned_ && buffer_.defined()) cudaHostUnregister(buffer_.data_ptr());
#endif
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
#ifdef TETRA_WITH_CUDA
  if (on_device && !pinned_) {
    cudaError_t e = cudaHostRegister(buffer_.data_ptr(), buffer_.nbytes(), cudaHostRegisterDefault);
    if (e == cudaSuccess) {
      pinned_ = true;
    } else {
      (void)cudaGetLastError();
      std::cerr << "tetra: warning: could not pin " << buffer_.nbytes() / (1 << 20)
                << " MiB of host memory for checkpoint snapshots (" << cudaGetErrorString(e)
                << "); copies will be slower\n";
    }
  }
#else
  (void)on_device;
#endif
  std::vector<StatePiece> out;
  out.reserve(pieces.size());
  int64_t off = 0;
  for (const StatePiece& p : pieces) {
    const int64_t n = p.end - p.begin;
    StatePiece h;
    h.name = p.name;
    h.full_shape = p.full_shape;
    h.box = p.box;
    h.begin = p.begin;
    h.end = p.end;
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
