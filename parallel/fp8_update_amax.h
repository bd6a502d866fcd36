// The optimizer's half of Param::fp8_update_amax (parallel/param.h): the routed experts' stacked
// weights under tensorwise FP8 are cast once a step, per expert, from each expert's amax; the
// AdamW update that writes the new weights measures those amaxes as it stores them
// (AdamWSegment::amax), so the step's cast (models/fp8_grouped.h step_weight) reads the weights once
// instead of once for the amaxes and once for the codes. For the 2B MoE that is one bf16 read of
// 3.3 GB a step (11 layers of 151M expert weights).
//
// Only for a parameter whose whole value this optimizer updates on this rank and the model then reads
// as it is (the replicated optimizer; ZeRO stages 1–2 at one rank, whose shard is the value itself):
// where a shard holds part of a weight, or a gather follows, the cast measures as before.
#pragma once
#include <vector>

#include "parallel/param.h"
#include "runtime/multi_tensor.h"

namespace tetra {

class Fp8UpdateAmaxes {
 public:
  Fp8UpdateAmaxes() = default;
  // Those of `params` with fp8_grouped, Tensorwise fp8_scaling and fp8_groups() > 0 get one U32 word
  // an expert, in one buffer on `device` (blockwise weights' blocks have no use for an expert's
  // amax); updates_whole false: none (the optimizer updates only shards of them).
  Fp8UpdateAmaxes(const std::vector<Param*>& params, Device device, bool updates_whole);

  // Before the update: every word zeroed (the update max-es into it), every amax stale.
  void begin();
  // `seg`, the update of all of p's value, into `segs`: one segment an expert, each with its amax
  // word, where p's amaxes are measured; else `seg` as it is.
  void append(std::vector<ops::AdamWSegment>& segs, ops::AdamWSegment seg, const Param& p) const;
  // After the update: the amaxes are of the weights the model now reads.
  void end();
  // The weights were written otherwise (a checkpoint loaded): no amax is of them.
  void stale();

 private:
  std::vector<Param*> params_;
  Tensor words_;  // U32 [Σ fp8_groups()]; each param's fp8_update_amax.bits a view into it
};

}  // namespace tetra
