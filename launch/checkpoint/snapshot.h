// HostSnapshot: host copies of this rank's StatePieces, taken between two steps so that an async
// checkpoint can be written in the background while training goes on (only the copy blocks the
// step). The host buffer is kept from one checkpoint to the next; where the state lives on a GPU it
// is page-locked (pinned) once, so the device-to-host copies run at full bandwidth. On the CPU the
// snapshot is a memcpy.
#pragma once
#include <vector>

#include "parallel/distributed_optimizer.h"

namespace tetra::launch {

class HostSnapshot {
 public:
  HostSnapshot() = default;
  ~HostSnapshot();
  HostSnapshot(const HostSnapshot&) = delete;
  HostSnapshot& operator=(const HostSnapshot&) = delete;

  // Copies the pieces' master, exp_avg and exp_avg_sq into the buffer as fp32 (bf16 moments widen
  // exactly; the buffer grown, and pinned when a piece is on a GPU, as needed) and returns pieces
  // that view those host copies. The views stay valid until the next take(). Returns after the
  // copies are complete.
  std::vector<StatePiece> take(const std::vector<StatePiece>& pieces);
  bool pinned() const { return pinned_; }

 private:
  void release();
  Tensor buffer_;  // fp32, 3 × total elements
  bool pinned_ = false;
};

}  // namespace tetra::launch
