// The bytes of training state one data-parallel rank holds, per ZeRO stage, computed from the
// exact flat layout (padding included) — the same numbers for `tetra plan` (no devices) and for
// the running optimizer. docs/zero.md derives them; in short, with T the padded parameter count,
// S = T / dp a rank's shard, w / g the working-weight / gradient dtype sizes, o = 4 + 2·s the
// optimizer state (fp32 master + two moments of s bytes: 12, or 8 with bf16 moments):
//   stage 0   w·T + g·T + (4·T if w ≠ 4) + 2s·T
//   stage 1   w·T + g·(T + S) + o·S (+ w·S all-gather source when w ≠ 4)
//   stage 2   w·T + g·S + o·S (+ w·S)  + g·(unit buffers: tied + in-flight, or T with accumulation)
//   stage 3   w·S + g·S + o·S ((o − 4)·S when w = 4: the master is the working shard)
//             + g·(unit buffers, as stage 2) + w·(gathered units: tied + 1 + fsdp_prefetch largest)
//             + S + w·(the FP8 units' other parameters) when FP8 weights are gathered cast
//             (Param::fp8_weight; parallel/zero/fp8_gather.h)
// On a GPU with bf16 weights and stage-2/3 bf16 gradients the persistent part of stage 3 is the
// ZeRO paper's (2 + 2 + 12)·N / dp.
#pragma once
#include "parallel/distributed_optimizer.h"
#include "parallel/zero/layout.h"

namespace tetra {

struct ZeroMemorySpec {
  int stage = 0;
  DType weight_dtype = DType::F32;  // working weights
  DType grad_dtype = DType::F32;
  int accumulation_steps = 1;
  int fsdp_prefetch = 1;
  bool overlap_grad_reduce = true;
  DType state_dtype = DType::F32;  // AdamW's exp_avg and exp_avg_sq (AdamWConfig::state_dtype)
};

// Reduce-scatters a sharded optimizer keeps in flight before it waits for the oldest (and frees
// its full gradient buffer): this bounds the unit gradient buffers of stages 2–3.
int zero_reduce_scatters_in_flight(int fsdp_prefetch);

// `layout` must be sharded over the data-parallel size (ParamSet::layout() of a built set, or a
// ZeroLayout made from the model's parameters for planning).
StateMemory zero_state_memory(const ZeroLayout& layout, const ZeroMemorySpec& spec);

}  // namespace tetra
