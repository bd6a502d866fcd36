// MoeBalance: the auxiliary-loss-free load balancing of a model's MoE layers (DeepSeek-V3 §2.1.2;
// docs/moe.md). During a step each layer's router counts the slots routed to each expert into its
// row of one flat int32 [layers, E] buffer (this rank's tokens, every micro-batch). After the
// optimizer step, finish_step() sums the buffer over the data-parallel group, so the loads are those
// of the step's whole global batch, moves every bias b_i by rate · sign(mean load − load_i), keeps
// the loads for the metrics (max/mean per layer) and clears the buffer. Every rank of the group
// updates its copy of the biases from the same sums, so the biases stay identical everywhere. Under a
// pipeline the buffer has a row for every MoE layer of the model and a rank counts (and moves the
// biases of) only the layers its stages hold; summing over the pipeline as well gives every rank
// every layer's loads. All on the device: no host synchronisation in the step.
#pragma once
#include <memory>
#include <vector>

#include "models/moe_mlp.h"
#include "runtime/communicator.h"
#include "runtime/host_readback.h"

namespace tetra {

class MoeBalance {
 public:
  // `layers`: the model's MoE MLPs (Model::moe_layers()), all with the same number of experts; their
  // load() become rows of the buffer. rate: model.moe.bias_update_rate (0: the biases stay).
  // `slots`: how many steps may be in flight (their loads read back independently).
  MoeBalance(std::vector<MoeMlp*> layers, Device device, float rate, int slots = 2);
  bool empty() const { return layers_.empty(); }
  int64_t layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t experts() const { return experts_; }

  // After the optimizer step: loads summed over `dp` (a device communicator; null or of size 1:
  // nothing to sum), the bias update (none where `control`, the step control of runtime/
  // step_control.h, says the step was skipped: its state stays the state before it), the loads
  // kept on the device for `slot`, the buffer cleared. All device work: part of a captured step.
  void finish_step(Communicator* dp, const Tensor* control, int slot = 0);
  // Enqueues the copy of `slot`'s kept loads to the host, after the step's work on the current
  // stream. Outside any CUDA graph capture: the host waits on its event (a copy captured into a
  // graph would record that event only at capture, and a replayed step would never be waited for).
  void read_back(int slot = 0);
  // The global loads of the step finished in `slot`, int32 [layers, E] on the host (waits for the
  // copy read_back(slot) enqueued).
  const int32_t* loads(int slot = 0);
  // max_e load / mean_e load of each layer of the step in `slot` (1 = perfectly balanced).
  std::vector<double> max_over_mean(int slot = 0);

 private:
  std::vector<MoeMlp*> layers_;
  int64_t experts_ = 0;
  float rate_ = 0;
  Tensor loads_;              // int32 [layers, E] on the device, counted into during a step
  std::vector<Tensor> kept_;  // per slot: the step's summed loads, until read back
  std::vector<std::unique_ptr<CountsReadback>> readback_;
};

}  // namespace tetra
