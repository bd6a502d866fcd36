// Where expert parallelism puts the routed experts' weights (ARCHITECTURE.md §4; docs/moe.md): rank
// e of an expert-parallel group of `ep` ranks holds experts [e·E/ep, (e+1)·E/ep) of every MoE layer,
// which are rows [e·R/ep, (e+1)·R/ep) of each expert-owned Param (placement.ep Expert: R full rows,
// one block per expert, in expert order). That slice is one contiguous range of the flattened full
// tensor, so checkpoint pieces and loads address it as [expert_offset, expert_offset + numel).
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/param.h"

namespace tetra {

bool expert_owned(const Param& p);
// Gives every expert-owned Param of `params` its slice: local_shape [R/ep, ...]. Fails (naming the
// parameter) where ep does not divide its rows.
void place_experts(const std::vector<Param*>& params, int ep);
// The first element of the slice of ep rank `rank` in the flattened full tensor of an expert-owned
// Param (its local numel times the rank).
int64_t expert_offset(const Param& p, int rank);
// The slice of ep rank `rank` of `full` (host fp32, p's full shape) as a host fp32 tensor of p's
// local shape (a view).
Tensor expert_slice(const Param& p, const Tensor& full, int rank);

}  // namespace tetra
