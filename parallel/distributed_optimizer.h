// DistributedOptimizer: how gradients are synchronised over the data-parallel group and how the
// optimizer state is sharded (ZeRO stage 0–3). The trainer calls the same hooks whatever the
// stage; each implementation decides what to communicate and when.
//
// Step protocol, per optimizer step:
//   begin_step()
//   for each micro-batch: for each layer: before_forward(l) … after_forward(l)
//                         in reverse:     before_backward(l) … after_backward(l, last_micro)
//   finish_gradients()         every gradient reduction complete
//   grad_norm_squared(acc)     acc += Σ g² of the (reduced) gradients over all shards, on the device
//   step(lr, clip_scale)       AdamW update; working weights ready for the next step's forward
//                              (sync_weights() makes them ready for anything else)
//   or step(control)           the same, with lr, clipping and skipping decided on the device
//                              (runtime/step_control.h): no host synchronisation in the step
//
// Checkpoints see the state as pieces of full parameters (StatePiece: a flat range of a box of the
// full tensor), independent of the mesh, so a checkpoint written at one dp / tp size and stage loads
// at another.
//
// Tensor parallelism: the ParamSet holds this rank's local slices (parallel/param_placement.h) and
// the data-parallel group is that of this tp rank, so gradient reduction and ZeRO sharding run over
// dp for each local slice. The tp group (given to make_distributed_optimizer) adds what the slices
// need beyond that (parallel/tensor/grad_sync.h): sequence-parallel gradients summed over tp, and a
// gradient norm that counts every element once.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/adamw.h"
#include "parallel/comm_scheduler.h"
#include "parallel/param_placement.h"
#include "parallel/param_set.h"
#include "parallel/tensor/grad_sync.h"
#include "runtime/communicator.h"

namespace tetra {

// Elements [begin, end) of box `box` of the full parameter `name`, flattened in the box's row-major
// order (the whole tensor's, for a parameter that is not split), with this rank's state for them
// (master fp32; the moments fp32 or bf16, AdamWConfig::state_dtype: checkpoints store them as fp32
// whatever the run keeps, launch/checkpoint). A tensor-parallel slice is a box (a row- or
// column-split shard; one per part of a fused parameter); a ZeRO shard of it, a flat range of that box.
struct StatePiece {
  std::string name;
  Shape full_shape;
  TensorBox box;  // empty: the whole tensor (a parameter this rank holds unsplit)
  int64_t begin = 0, end = 0;
  Tensor master{}, exp_avg{}, exp_avg_sq{};  // [end − begin] device views: master fp32, moments fp32 or bf16
};

// The pieces of elements [begin, end) of p's local tensor whose state lies in master, exp_avg
// and exp_avg_sq (flat views of exactly those elements), one per box they fall in; appended to out.
void append_state_pieces(std::vector<StatePiece>& out, const Param& p, int64_t begin, int64_t end,
                         const Tensor& master, const Tensor& exp_avg, const Tensor& exp_avg_sq);
// The same for the elements of [begin, end) whose copy on this rank is the one saved
// (counted_ranges: not another tp rank's identical copy of a replicated parameter or block).
void append_saved_state_pieces(std::vector<StatePiece>& out, const Param& p, int64_t begin, int64_t end,
                               const Tensor& master, const Tensor& exp_avg, const Tensor& exp_avg_sq);

// Bytes of training state held by this rank at its peak in a step, by category (for `tetra plan`
// and the start-up report; docs/zero.md gives the formula of each stage):
//   weights        working weights resident for the whole run (full for stages 0–2, a shard for 3)
//   gradients      reduced gradient shard (stages 1–3) plus the full-size buffers gradients
//                  accumulate in (the flat buffer for 0–1; per-layer buffers for 2–3, bounded)
//   optimizer      fp32 master weights where they are not the working weights, exp_avg, exp_avg_sq
//                  (fp32 or bf16: AdamWConfig::state_dtype)
//   communication  collective staging: the bf16 all-gather source shard (stages 1–2) and the
//                  gathered layers' weights (stage 3: tied layers + 1 + fsdp_prefetch layers)
struct StateMemory {
  double weights = 0, gradients = 0, optimizer = 0, communication = 0;
  // Of the total, the bytes that exist for the whole run (what the ZeRO formula counts).
  double persistent = 0;
  double total() const { return weights + gradients + optimizer + communication; }
};

class DistributedOptimizer {
 public:
  virtual ~DistributedOptimizer() = default;
  virtual int zero_stage() const = 0;
  virtual Device device() const = 0;  // where the parameters and the optimizer state live

  virtual void begin_step() = 0;
  virtual void before_forward(int layer) {}
  virtual void after_forward(int layer) {}
  virtual void before_backward(int layer) {}
  virtual void after_backward(int layer, bool last_micro) = 0;
  virtual void finish_gradients() = 0;
  // acc fp64 [1] on the run's device += the global Σ g² (every rank gets the same value); device-
  // side, no host synchronisation.
  virtual void grad_norm_squared(Tensor& acc) = 0;
  virtual void step(float lr, float grad_scale) = 0;
  // The update as step_control decided it (control: fp64 [kStepControlSlots] on the device, after
  // ops::step_control). The update count lives in the control: after reading it back the caller
  // mirrors it with set_steps_taken (checkpoints save steps_taken()).
  virtual void step(const Tensor& control) = 0;

  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t s) = 0;

  // Pieces this rank writes: disjoint over the ranks of a job, together covering every parameter.
  virtual std::vector<StatePiece> pieces_to_save() = 0;
  // Pieces this rank must fill from a checkpoint (views into its state; may overlap other ranks').
  virtual std::vector<StatePiece> pieces_to_load() = 0;
  // After pieces_to_load() were filled: rebuild working weights from the master copy.
  virtual void after_load() = 0;
  // Pipeline copies (ARCHITECTURE.md §3 "Parameter placement"): `params` of this rank are held by
  // other pipeline ranks too (a tied weight whose users sit on different stages: GPT-2's wte on
  // the first and the last stage). finish_gradients() sums their reduced gradients over `group`
  // (the ranks of one data-parallel index that hold a copy), so every copy takes the same update;
  // only the `owner`'s copy counts in the gradient norm and goes into checkpoints. They must be
  // laid out as units of their own (Param::own_unit) on every copy, so that their shards match.
  // Call once, before the first step.
  virtual void tie(std::vector<Param*> params, Communicator& group, bool owner) = 0;

  // Makes the full working weights current for use outside a training step (evaluation), where
  // an implementation leaves part of them to the next step's forward (ZeRO 1–2). Blocks the
  // current stream, not the host.
  virtual void sync_weights() {}

  virtual StateMemory memory() const = 0;
};

struct DistributedOptimizerOptions {
  int zero_stage = 0;
  double bucket_bytes = 25.0 * 1024 * 1024;  // stage 0 all-reduce buckets
  bool overlap_grad_reduce = true;           // reduce during backward (else all in finish_gradients)
  int fsdp_prefetch = 1;                     // stage 3: layers all-gathered ahead of the one computing
  int accumulation_steps = 1;                // micro-batches per step (memory bound of stages 2–3)
  // Stage 3 under a pipeline schedule: a unit stays gathered from its first use in a step to the
  // step's end, instead of being gathered again for every micro-batch's forward and backward (as
  // torchtitan runs FSDP with pipeline parallelism, reshard_after_forward off).
  bool keep_gathered_in_step = false;
  std::optional<DType> grad_dtype;           // fp32 | bf16; none: chosen by param_storage_for
  AdamWConfig adamw;
};

// How the ParamSet must be built for an optimizer: the shard count of its layout, the gradient
// dtype and whether the full flat gradient buffer exists. Gradient dtype "auto": bf16 where the
// working weights are bf16 and either the gradients are sharded (stages 2–3: the ZeRO formula's
// 2 + 2 + 12 bytes per parameter, as FSDP with MixedPrecision(reduce_dtype=bf16)) or each step is
// one micro-batch (nothing to accumulate; half the bytes to reduce, as llm.c); fp32 otherwise
// (exact accumulation over micro-batches). "fp32"/"bf16" force it (docs/zero.md).
struct ParamStorage {
  int shards = 1;
  DType grad_dtype = DType::F32;
  bool full_grads = true;
};
ParamStorage param_storage_for(const DistributedOptimizerOptions& options, DType working_dtype, int dp_size);

// Stage 0 (ReplicatedOptimizer): replicated state, bucketed all-reduce of gradients. Stages 1–3
// (ZeroOptimizer): state sharded over `dp`, reduce-scatter / all-gather per layer. `params` must be
// built as param_storage_for(options, …, dp.size()) says. Collectives go through `scheduler` (the
// device's communication stream), which measures how long compute waits on them. `tp`: the
// tensor-parallel group of this rank's parameter slices (null or of size 1 without tensor
// parallelism) and the sub-groups its replicated parts' gradients are summed over.
std::unique_ptr<DistributedOptimizer> make_distributed_optimizer(ParamSet& params, Communicator& dp,
                                                                 CommScheduler& scheduler,
                                                                 const DistributedOptimizerOptions& options,
                                                                 const TpGradGroups& tp = {});

}  // namespace tetra
