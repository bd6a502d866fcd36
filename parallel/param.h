// Param: one trainable tensor of a model — its PyTorch-style name (checkpoints), its full shape,
// how it lies over the mesh (ParamPlacement; parallel/param_placement.h maps its local piece onto the
// full tensor), and this rank's working value and gradient.
// Values and gradients are views into flat buffers owned by a ParamSet, so data-parallel buckets
// and ZeRO shards are contiguous ranges of one buffer.
#pragma once
#include <string>
#include <vector>

#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace tetra {

// How a Param lies over one mesh axis (ARCHITECTURE.md §3 "Parameter placement").
struct AxisPlacement {
  enum class Kind {
    Replicated,  // a full copy on every rank of the axis
    Sharded,     // split along `dim` into `size` equal slices; rank `rank` holds slice `rank`
    Expert,      // owned by the one rank `rank` of the axis (a routed expert's weights)
  };
  Kind kind = Kind::Replicated;
  // Sharded: 0 (rows; a Param with parts splits each part separately in whole units, so the slice
  // is one block of rows per part — the stride of a fused QKV or gate/up weight) or 1 (columns).
  int dim = -1;
  int size = 1;  // ranks on the axis
  int rank = 0;  // this rank's index on it
  // Sharded along dim 0, a Param with parts: per part, how many consecutive ranks hold each of its
  // blocks. 1: the part splits into `size` blocks, one a rank. r > 1 (a part of fewer whole units
  // than ranks: grouped-query attention's key and value heads when tp > n_kv_heads, as Megatron-LM
  // replicates them): it splits into size/r blocks and rank t holds block t / r, replicated over the
  // r ranks [t/r·r, t/r·r + r); their gradients of it are summed over exactly those r ranks.
  // Empty: 1 for every part.
  std::vector<int> part_replicas;
  int replicas_of_part(size_t part) const {
    return part < part_replicas.size() ? part_replicas[part] : 1;
  }
  bool sharded() const { return kind == Kind::Sharded && size > 1; }
};

struct ParamPlacement {
  AxisPlacement tp;  // tensor parallelism
  AxisPlacement ep;  // expert parallelism (Expert: a routed expert's weights; else Replicated)
  // The gradient is summed over the tp group as well as over data parallelism: a replicated weight
  // that acts on a sequence-sharded activation (sequence parallelism: norms, the bias added after a
  // reduce-scatter, positions), whose gradient on each tp rank covers that rank's tokens only.
  bool grad_over_tp = false;
  // Parameters with the same non-empty tie group are one tensor read by several layers, which may
  // sit on different ranks (GPT-2's token embedding and LM head on the first and last pipeline
  // stage): their gradients are summed over the ranks that hold a copy.
  std::string tie_group;
};

// A row range of a fused parameter (dim 0 of its full shape), e.g. the q, k and v of a fused
// [(H + 2·Hkv)·D, C] projection. Tensor parallelism splits each part separately, in whole units
// (a head's D rows), so every rank holds matching heads of every part. Named parts are stored as
// tensors of their own in consolidated checkpoints and Hugging Face files (Llama's q_proj, k_proj,
// v_proj); unnamed ones only describe the split, and the fused tensor is stored whole (GPT-2's
// c_attn, which Hugging Face keeps fused too).
struct ParamPart {
  std::string name;       // e.g. "model.layers.0.self_attn.k_proj.weight"; "" = not stored apart
  int64_t row_begin = 0;  // first row in the fused tensor
  int64_t rows = 0;
  int64_t unit_rows = 1;  // rows that stay together when split (a head: D)
};

struct Param {
  std::string name;         // e.g. "transformer.h.0.attn.c_attn.weight"
  Shape full_shape;         // tetra layout, unsplit ([out, in] for linear weights)
  Shape local_shape;        // this rank's piece (full_shape unless sharded)
  ParamPlacement placement;
  bool weight_decay = true;  // PyTorch convention here: tensors of 2+ dims decay, biases/norms don't
  // false: a persistent buffer, not a parameter (PyTorch's register_buffer; DeepSeek-V3's router
  // bias e_score_correction_bias): fp32 on every backend, the same on every rank, never touched by
  // the optimizer or counted in gradient norms; its layer updates it. Checkpoints, consolidated
  // files and init_from carry it like a parameter.
  bool trainable = true;
  // The consolidated (PyTorch) layout is the transpose of tetra's (GPT-2 Conv1D stores [in, out]).
  bool transposed_in_checkpoint = false;
  // Fused parameters: the parts, in row order, covering every row once (all named or none).
  // Per-rank checkpoints keep the fused tensor under `name`; consolidated ones store named parts.
  std::vector<ParamPart> parts;
  bool stored_in_parts() const { return !parts.empty() && !parts.front().name.empty(); }
  // Which layer (FSDP unit / gradient bucket boundary) the parameter belongs to.
  int layer_index = 0;
  // Other layers that also read this parameter (tied weights: GPT-2's LM head reads wte, owned by
  // the embedding). FSDP keeps such a unit gathered while any of its layers still needs it.
  std::vector<int> tied_layers;
  // Held by several pipeline ranks (a tied weight whose users sit on different stages: GPT-2's wte
  // on the first and the last stage): laid out as a ZeRO unit of its own, so that every copy is
  // sharded alike and the copies' gradients add up shard by shard (DistributedOptimizer::tie).
  bool own_unit = false;
  // Standard deviation of the normal init (0 with init_value set: constant fill).
  float init_std = 0.02f;
  float init_value = 0.0f;
  bool init_constant = false;

  Tensor value;  // working weights: fp32 on the CPU, bf16 on CUDA
  // Set by a Linear whose FP8 GEMMs cast this weight (train.fp8.recipe, models/fp8_linear.h): how
  // they cast it. ZeRO-3 then gathers it as FP8 codes with their scales into fp8_q and fp8_scale,
  // half the bytes of a bf16 gather, and leaves `value` undefined (parallel/zero/fp8_gather.h).
  bool fp8_weight = false;
  ops::Fp8Scaling fp8_scaling = ops::Fp8Scaling::Tensorwise;
  DType fp8_format = DType::F8E4M3;
  // The gathered FP8 weight: codes [out, in] and scales, as ops::fp8_quantize of the whole weight
  // writes them; defined only while ZeRO-3 holds the weight gathered.
  Tensor fp8_q, fp8_scale;
  // Set by the routed experts under FP8 (models/moe_mlp.h; models/fp8_grouped.h casts_weights_once)
  // on their stacked weights [experts·O, I], with fp8_scaling: cast once a step into Fp8StepCopy where
  // not ZeRO-3 (Fp8StepWeights; ops::moe_grouped_fp8_cast). Tensorwise: per expert, q [G, O, I],
  // q_t [G, I, O], scale and scale_t the same fp32 [G]; Blocks128: the stack's 128×128 blocks, q_t
  // [I, G·O], each layout with its block scales.
  bool fp8_grouped = false;
  // With fp8_grouped: the rows O of each expert's [O, I] in `value` [G·O, I]; G follows from the
  // local shape, which expert parallelism narrows after the layer has set this.
  int64_t fp8_group_rows = 0;
  int64_t fp8_groups() const { return fp8_group_rows > 0 ? local_shape[0] / fp8_group_rows : 0; }
  // With fp8_grouped and Tensorwise: each expert's amax of `value` as the optimizer's last update
  // measured it while writing it (bits U32 [fp8_groups()], the bits of max |w[g]|;
  // parallel/fp8_update_amax.h), so that the step's cast reads the weights once. fresh: that update is
  // the last write of `value` (set after it; cleared when a training step ends, Fp8StepWeights, and
  // when a checkpoint is loaded); the cast takes the amaxes only then. bits stays undefined where the
  // optimizer updates only shards, and for blockwise weights.
  struct Fp8UpdateAmax {
    Tensor bits;
    bool fresh = false;
  };
  mutable Fp8UpdateAmax fp8_update_amax;
  // Within a training step (models/fp8_step_weights.h enables it around the step's forward and
  // backward), the FP8 cast of `value` with its transposed copy, made at the step's first FP8 GEMM
  // of the weight and read by every later one (later micro-batches, recompute, the input gradients'
  // wᵀ): one cast a step instead of one a GEMM. The weights change only between steps, and the
  // copies are dropped when the step ends. A cache of `value`, hence mutable.
  struct Fp8StepCopy {
    bool enabled = false;
    Tensor q, scale, q_t, scale_t;  // [out, in] and [in, out], as ops::fp8_quantize writes them
  };
  mutable Fp8StepCopy fp8_step;
  Tensor grad;   // gradient, accumulated over micro-batches
  int64_t offset = 0;  // element offset of this param in its ParamSet's flat buffers
  int64_t numel() const { return shape_numel(local_shape); }

  // `grad` holds nothing of this step yet. Set exactly where a step's gradient buffer is prepared
  // (ParamSet::zero_grads, ZeroGradReducer's per-unit buffers), cleared by the step's first write
  // (first_grad_write). A writer that writes every element of `grad` (the routed experts' grouped
  // weight-gradient GEMMs, models/moe_mlp.cpp) then stores instead of accumulating, which spares
  // reading what the buffer held. It is host state, set and cleared at the same points of every step
  // whatever the schedule, so a step captured as a CUDA graph makes the same choices at every
  // replay. false (unknown) is always safe: the writer accumulates.
  bool grad_empty = false;
  // Every writer of `grad` asks first_grad_write and the first write of a step writes every element
  // (set by the layer that owns such a parameter): preparing the buffer for a step need not zero
  // it. Only then may grad_stale be set.
  bool grad_whole_writes = false;
  // Empty and not zeroed: `grad` holds values of an earlier step (or none) until the step's first
  // write. Whatever reads `grad` where that write may not have come first (a reduction) settles it
  // first (settle_grads in parallel/param_set.h: zeros).
  bool grad_stale = false;
  // true: this is the step's first write into `grad`, which holds nothing of the step, so the
  // writer must write every element (store, not add); false: accumulate. Either way, `grad` then
  // holds something of this step.
  bool first_grad_write() {
    const bool first = grad_empty;
    grad_empty = grad_stale = false;
    return first;
  }
};

}  // namespace tetra
