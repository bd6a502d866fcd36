// The device side of a training step (runtime/step_control.h): the loss sum and Σ g² of the step,
// the step control (schedule position, update count, decisions), the LR of every step, and per
// slot (step % 2: two steps in flight at most) the readback of the control to the host, the
// optimizer phase's timing events and the step's CUDA graph (train.cuda_graphs; each graph records
// its own events, so both can be in flight) with the fixed micro-batch buffers a graph reads.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "data/data_loader.h"
#include "launch/config/config.h"
#include "runtime/cuda_graph.h"
#include "runtime/host_readback.h"
#include "runtime/step_control.h"
#include "runtime/stream.h"
#include "runtime/tensor.h"

namespace tetra::launch {

class StepState {
 public:
  // The control starts at the run's position: start_step steps done, `updates` optimizer updates
  // taken. tokens_per_step: the loss sum's divisor; accumulation_steps: micro-batches per step.
  StepState(const Config& cfg, Device device, int64_t start_step, int64_t updates, int64_t tokens_per_step,
            int accumulation_steps, float beta1, float beta2);

  static int slot_of(int64_t step) { return static_cast<int>(step % 2); }
  Tensor& loss_sum() { return loss_sum_; }  // fp64 [1]: Σ token losses of the step
  Tensor& grad_sq() { return grad_sq_; }    // fp64 [1]: Σ g² over every parameter
  Tensor& control() { return control_; }    // fp64 [kStepControlSlots]
  // The step's decisions (clip, skip, stop, LR) from the loss and the norm, on the device.
  void decide();

  // The optimizer phase of a step, timed on the compute stream between these two marks.
  void optimizer_begins(int64_t step, const Stream& compute);
  void optimizer_ends(int64_t step, const Stream& compute);
  double optimizer_seconds(int64_t step) const;

  // train.cuda_graphs: steps from graphs_from() on may run from a graph (-1: never).
  int64_t graphs_from() const { return graph_from_step_; }
  // The fixed buffers a captured step reads its micro-batches from: `batch` copied into micro's.
  void set_graph_batch(int micro, const data::LoadedBatch& batch);
  data::LoadedBatch graph_batch(int micro) const;
  bool captured(int64_t step) const;
  // Captures `enqueue` (the step's device work) into the slot's graph; returns its node count.
  size_t capture(int64_t step, const std::function<void()>& enqueue);
  void replay(int64_t step);

  // The control, copied to the host after the step's work (no wait).
  void read_back(int64_t step);
  // Waits for it, for at most timeout_s (≤ 0: forever); past that, calls on_timeout (which throws).
  const double* wait_read_back(int64_t step, double timeout_s, const std::function<void()>& on_timeout);

 private:
  struct Slot {
    std::unique_ptr<HostReadback<double>> readback;
    std::unique_ptr<Event> opt_begin, opt_end;
    std::unique_ptr<CudaGraph> graph;
  };
  Device device_;
  Tensor loss_sum_, grad_sq_, control_, lr_table_;
  StepControlConfig control_cfg_;
  Slot slots_[2];
  std::vector<Tensor> graph_ids_, graph_targets_;
  int64_t graph_from_step_ = -1;
};

}  // namespace tetra::launch
