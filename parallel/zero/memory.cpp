#include "parallel/zero/memory.h"

#include <algorithm>

#include "runtime/error.h"

namespace tetra {

int zero_reduce_scatters_in_flight(int fsdp_prefetch) { return std::max(1, fsdp_prefetch); }

namespace {

// Elements of the parameters other than the FP8 weights in the units that hold an FP8 weight
// (their norms and biases: the packed shard buffer of parallel/zero/fp8_gather.h holds at most
// these); −1 if no unit holds one.
int64_t fp8_unit_others(const ZeroLayout& layout) {
  int64_t others = -1;
  for (const ZeroUnit& u : layout.units()) {
    bool fp8 = false;
    int64_t rest = 0;
    for (int pi : u.params) {
      const Param& p = *layout.params()[static_cast<size_t>(pi)];
      fp8 = fp8 || p.fp8_weight;
      if (!p.fp8_weight) rest += p.numel();
    }
    if (fp8) others = std::max<int64_t>(others, 0) + rest;
  }
  return others;
}

}  // namespace

StateMemory zero_state_memory(const ZeroLayout& layout, const ZeroMemorySpec& spec) {
  TETRA_CHECK(spec.stage >= 0 && spec.stage <= 3, "zero_state_memory: stage ", spec.stage, " outside 0..3");
  const double T = static_cast<double>(layout.total());
  const double S = static_cast<double>(layout.shard_total());
  const double w = static_cast<double>(dtype_size(spec.weight_dtype));
  const double g = static_cast<double>(dtype_size(spec.grad_dtype));
  const bool separate_master = spec.weight_dtype != DType::F32;
  const double moments = 2.0 * static_cast<double>(dtype_size(spec.state_dtype));  // exp_avg + exp_avg_sq
  const double master_and_moments = 4.0 + moments;
  StateMemory m;
  if (spec.stage == 0) {
    m.weights = w * T;
    m.gradients = g * T;
    m.optimizer = (separate_master ? master_and_moments : moments) * T;
    m.persistent = m.total();
    return m;
  }
  // Full-size gradient buffers of stages 2–3: per unit, alive from the unit's first backward to
  // the end of its reduce-scatter. With several micro-batches (or reductions deferred to the end)
  // every unit's buffer lives through the step; otherwise at most the tied units, the unit whose
  // backward runs, and the reduce-scatters in flight.
  double unit_grads = T;
  if (spec.accumulation_steps <= 1 && spec.overlap_grad_reduce)
    unit_grads = static_cast<double>(layout.tied_elements() +
                                     layout.largest_units(zero_reduce_scatters_in_flight(spec.fsdp_prefetch) + 1,
                                                          /*include_tied=*/false));
  unit_grads = std::min(unit_grads, T);
  // One shard below stage 3: the optimizer works on the flat buffers themselves (ZeroOptimizer): no
  // working-weight shard, no fp32 master beside fp32 weights, at stage 1 no gradient shard.
  const bool whole = layout.shards_are_units();
  const double optimizer = (whole && !separate_master ? moments : master_and_moments) * S;
  const double weight_shard = separate_master && !whole ? w * S : 0.0;
  switch (spec.stage) {
    case 1:
      m.weights = w * T;
      m.gradients = g * (T + (whole ? 0.0 : S));
      m.optimizer = optimizer;
      m.communication = weight_shard;
      m.persistent = m.total();
      break;
    case 2:
      m.weights = w * T;
      m.gradients = g * (S + unit_grads);
      m.optimizer = optimizer;
      m.communication = weight_shard;
      m.persistent = w * T + g * S + m.optimizer + m.communication;
      break;
    case 3: {
      m.weights = w * S;
      m.gradients = g * (S + unit_grads);
      m.optimizer = (separate_master ? master_and_moments : moments) * S;
      const double gathered = static_cast<double>(
          layout.tied_elements() + layout.largest_units(1 + std::max(0, spec.fsdp_prefetch), /*include_tied=*/false));
      m.communication = w * std::min(gathered, T);
      m.persistent = m.weights + g * S + m.optimizer;
      // FP8 weights (parallel/zero/fp8_gather.h): the shard cast once per step, a byte an element,
      // and its FP8 units' other parameters packed, for the whole run. A gathered FP8 unit holds a
      // byte per element plus those parameters, less than the w·G counted above for bf16 and fp32.
      if (const int64_t others = fp8_unit_others(layout); others >= 0) {
        const double fp8_shard = S + w * static_cast<double>(others);
        m.communication += fp8_shard;
        m.persistent += fp8_shard;
      }
      break;
    }
  }
  return m;
}

}  // namespace tetra
