// DistributedOptimizer: how gradients are synchronised over the data-parallel group and how the
// optimizer state is sharded (ZeRO stage 0–3). The trainer calls the same hooks whatever the
// stage; each implementation decides what to communicate and when.
//
// Step protocol, per optimizer step:
//   begin_step()
//   for each micro-batch: for each layer: before_forward(l) … after_forward(l)
//                         in reverse:     before_backward(l) … after_backward(l, last_micro)
//   finish_gradients()         every gradient reduction complete
//   grad_norm()                global L2 norm of the (reduced) gradients, over all shards
//   step(lr, clip_scale)       AdamW update; working weights ready for the next forward
//
// Checkpoints see the state as pieces of flattened full parameters (StatePiece), independent of
// the mesh, so a checkpoint written at one dp size / stage loads at another.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "parallel/adamw.h"
#include "parallel/comm_scheduler.h"
#include "parallel/param_set.h"
#include "runtime/communicator.h"

namespace tetra {

// Elements [begin, end) of the flattened full parameter `name`, with this rank's fp32 state for them.
struct StatePiece {
  std::string name;
  Shape full_shape;
  int64_t begin = 0, end = 0;
  Tensor master, exp_avg, exp_avg_sq;  // fp32 [end − begin], device views
};

// Bytes of training state held by this rank, by category (for plan and the start-up report).
struct StateMemory {
  double weights = 0, gradients = 0, optimizer = 0, communication = 0;
};

class DistributedOptimizer {
 public:
  virtual ~DistributedOptimizer() = default;
  virtual int zero_stage() const = 0;

  virtual void begin_step() = 0;
  virtual void before_forward(int layer) {}
  virtual void after_forward(int layer) {}
  virtual void before_backward(int layer) {}
  virtual void after_backward(int layer, bool last_micro) = 0;
  virtual void finish_gradients() = 0;
  virtual double grad_norm() = 0;
  virtual void step(float lr, float grad_scale) = 0;
  // Throws the accumulated gradients away (a skipped step).
  virtual void discard_gradients() = 0;

  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t s) = 0;

  // Pieces this rank writes: disjoint over the ranks of a job, together covering every parameter.
  virtual std::vector<StatePiece> pieces_to_save() = 0;
  // Pieces this rank must fill from a checkpoint (views into its state; may overlap other ranks').
  virtual std::vector<StatePiece> pieces_to_load() = 0;
  // After pieces_to_load() were filled: rebuild working weights from the master copy.
  virtual void after_load() = 0;

  virtual StateMemory memory() const = 0;
};

struct DistributedOptimizerOptions {
  int zero_stage = 0;
  double bucket_bytes = 25.0 * 1024 * 1024;
  bool overlap_grad_reduce = true;
  int fsdp_prefetch = 1;
  AdamWConfig adamw;
};

// Plain data parallelism (stage 0): replicated state, bucketed all-reduce of gradients.
// Collectives go through `scheduler` (the device's communication stream), which measures how
// long compute waits on them.
std::unique_ptr<DistributedOptimizer> make_distributed_optimizer(ParamSet& params, Communicator& dp,
                                                                 CommScheduler& scheduler,
                                                                 const DistributedOptimizerOptions& options);

}  // namespace tetra
