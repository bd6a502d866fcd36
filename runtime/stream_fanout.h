// Independent pieces of device work run side by side on one device: the weight-gradient GEMMs of a
// layer (four of 768×768×16384 to 3072×768×16384 at GPT-2 124M) each leave part of the GPU idle in
// their last wave and between launches; issued on separate streams they fill each other's gaps.
//
//   fork:  the current ("home") stream records an event that every side stream used waits on;
//   run:   piece i is issued on lane i % ways (lane 0 is the home stream itself, lane k ≥ 1 the
//          device's k-th side stream), in the order given;
//   join:  each side stream used records an event that the home stream waits on.
// Work issued on the home stream after run_fanned_out returns follows every piece, so tensors a
// piece read or wrote may be freed there (runtime/memory_cuda.cpp's stream semantics); tensors a
// piece allocates are allocated and freed on its lane. Pieces must not depend on each other and
// must not communicate (collectives keep their own streams and order).
//
// On the CPU, with ways = 1 or one piece, and for a call made while the device's side streams are
// in use (from inside a piece, or by another thread) every piece runs in order on the current
// stream. The fork and join are plain event records and waits, so they are captured into a CUDA
// graph like any other work (the side streams join the capture); the side streams and events are
// made on first use, which must therefore come before any capture (the warm-up step).
// A piece that throws stops the pieces after it; the join still runs, then the exception is rethrown.
#pragma once
#include <functional>
#include <span>

#include "runtime/device.h"

namespace tetra {

using DevicePiece = std::function<void()>;

// The most lanes a fan-out spreads over (the home stream and three side streams).
constexpr int kMaxFanoutWays = 4;

// Runs `pieces` over min(ways, kMaxFanoutWays, pieces.size()) lanes of `device` as above. ways ≥ 1.
void run_fanned_out(Device device, int ways, std::span<const DevicePiece> pieces);
// Runs `pieces` one after another on the current stream (what a fan-out of one lane does).
void run_in_order(std::span<const DevicePiece> pieces);

// Lanes the layers' weight-gradient GEMMs spread over: TETRA_WGRAD_STREAMS (1 to kMaxFanoutWays;
// unset: 1), read once. weight_grad_ways_from parses a value (null or empty: 1); anything else is
// a Config error naming the variable.
int weight_grad_ways();
int weight_grad_ways_from(const char* value);

}  // namespace tetra
