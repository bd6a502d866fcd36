// BlendSchedule: which dataset of a weighted blend each training sequence slot draws from, and
// which sample of that dataset it is — a pure function of the slot, so that the sampler's position
// stays the step number alone (resume reads exactly the tokens an uninterrupted run would).
//
// Over one period of P = 65536 slots, dataset d gets n_d slots: its share w_d / Σw of P, rounded
// by largest remainder so that the n_d sum to P. Slot i of the period goes to the dataset with the
// largest deficit n_d·(i + 1) − c_d·P (c_d: slots d already got in this period; ties to the lower
// index) — the greedy interleave of Megatron's blended datasets, in exact integer arithmetic.
// Periods repeat: slot s lies in period s / P at offset s mod P, and is sample
// (s / P)·n_d + (its rank among d's slots in the period) of dataset d. Within a period every
// prefix is within one slot of the exact shares; the weights actually used are n_d / P.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tetra::data {

struct BlendSlot {
  int source = 0;     // dataset of the blend
  int64_t index = 0;  // sample of that dataset: its 0th, 1st, ... draw
};

class BlendSchedule {
 public:
  static constexpr int64_t kPeriod = 65536;

  // weights: one per dataset, each > 0 and finite (normalised here). One dataset: the identity.
  explicit BlendSchedule(std::vector<double> weights);

  int num_sources() const { return static_cast<int>(per_period_.size()); }
  BlendSlot at(int64_t slot) const;
  // Slots per period that dataset d gets (sums to kPeriod), and the weight they amount to.
  int64_t per_period(int d) const { return per_period_[static_cast<size_t>(d)]; }
  double effective_weight(int d) const { return static_cast<double>(per_period(d)) / kPeriod; }

 private:
  std::vector<uint16_t> source_;    // [kPeriod]: dataset of each offset (empty for one dataset)
  std::vector<uint32_t> rank_;      // [kPeriod]: draws of that dataset earlier in the period
  std::vector<int64_t> per_period_;
};

}  // namespace tetra::data
