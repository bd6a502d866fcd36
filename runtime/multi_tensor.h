// Multi-tensor ops: one call updates many parameters, so the optimizer step is a few kernel
// launches instead of one per parameter. CUDA runs one fused kernel per batch of up to 256
// segments (runtime/cuda/adamw.cu); the CPU loops over the segments (runtime/cpu/multi_tensor.cpp).
#pragma once
#include <vector>

#include "runtime/ops.h"

namespace tetra::ops {

// One parameter (or a contiguous range of one, e.g. a ZeRO shard) to update with AdamW.
struct AdamWSegment {
  Tensor master;             // fp32 master weights
  Tensor grad;               // fp32 or bf16, master's numel
  Tensor m, v;               // moments, master's numel: both fp32 or both bf16 (runtime/ops.h adamw_update)
  Tensor working;            // optional (undefined: none): fp32 or bf16 copy that receives the new weights
  float weight_decay = 0.0f; // this segment's decay; replaces AdamWHyper::weight_decay
  // optional (undefined: none), U32 [1]: max-ed with the bits of the largest new |value| as the model
  // reads it (working as stored where given, else master; a NaN's bits win), as fp8_quantize measures
  // a tensorwise amax: a cast of the new weights can take it instead of reading them for it. The
  // caller zeroes it first; a step the control skips max-es in the unchanged values' amax.
  Tensor amax;
};

// adamw_update on every segment with the shared hyper-parameters h (h.weight_decay is ignored: each
// segment carries its own). All segments live on one device. Same result as calling adamw_update
// on each segment in turn.
// With `control` (fp64 [kStepControlSlots] on the segments' device, runtime/step_control.h) the
// step's values come from the device instead of h: nothing happens when the step is skipped, else
// lr, the bias-correction count (updates) and the clipping scale are the control's, read by the
// kernel, so the host need not know them (h gives betas and eps).
void adamw_update_multi(const std::vector<AdamWSegment>& segments, const AdamWHyper& h,
                        const Tensor* control = nullptr);

}  // namespace tetra::ops
