// PipelineExecutor: runs one pipeline rank's list of a Schedule (parallel/pipeline/schedule.h) for a step
// — or, with a forward-only schedule, an evaluation (ARCHITECTURE.md §3, docs/pipeline.md). It
// owns the micro-batch loop: compute instructions go to the model side (PipelineCompute), the
// P2P batches to the rank's channels (PipelineTransport) through a CommScheduler, which measures
// how long compute waited for a receive: the pipeline bubble. At pp = 1 the list is the trivial
// F0.m, B0.m with no transfers, and the executor adds nothing to the step.
//
// Tensors that cross a stage boundary are the stage's output activation and the gradient of its
// input, one per micro-batch; between chunks of the same rank (DualPipeV's turn) they are handed
// over without a transfer.
#pragma once
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "parallel/comm_scheduler.h"
#include "parallel/pipeline/transport.h"
#include "parallel/pipeline/schedule.h"

namespace tetra {

// The model side of one pipeline rank: what a chunk computes for one micro-batch. `mb` counts
// within the chunk's flow (PipelineLayout::global_micro_batch gives the step's number).
class PipelineCompute {
 public:
  virtual ~PipelineCompute() = default;
  // A receive buffer for what crosses a boundary of chunk `chunk` (its input or its output's
  // gradient) for micro-batch `mb`.
  virtual Tensor boundary_buffer(int chunk, int mb) = 0;
  // F. input: the previous stage's output, undefined at the first stage. Returns the output
  // (undefined at the last stage, which keeps its loss).
  virtual Tensor forward(int chunk, int mb, const Tensor& input) = 0;
  // B (weights: with the weight gradients) or B-input-only. dy: the gradient of the output from
  // the next stage, undefined at the last stage. Returns the gradient of the input, undefined at
  // the first stage. last: after this, the chunk's weight gradients of the step are complete.
  virtual Tensor backward(int chunk, int mb, const Tensor& dy, bool weights, bool last) = 0;
  // W of an earlier B-input-only.
  virtual void weight(int chunk, int mb, bool last) = 0;
  // FB: the forward of one micro-batch and the full backward of another, in flight together. The
  // default runs one after the other; a model may overlap one's communication with the other's
  // compute. Returns (forward output, input gradient).
  virtual std::pair<Tensor, Tensor> forward_backward(int f_chunk, int f_mb, const Tensor& input, int b_chunk, int b_mb,
                                                     const Tensor& dy, bool last) {
    Tensor y = forward(f_chunk, f_mb, input);
    return {y, backward(b_chunk, b_mb, dy, /*weights=*/true, last)};
  }
};

class PipelineExecutor {
 public:
  // `transport` and `scheduler` may be null when the schedule has no transfers (pp = 1).
  PipelineExecutor(const Schedule& schedule, int rank, PipelineTransport* transport, CommScheduler* scheduler);

  // Runs the rank's list once. Every receive it posts is waited for, and every send is complete
  // (compute waits for it) before it returns, so no buffer outlives its transfer.
  void run(PipelineCompute& compute);

  const Schedule& schedule() const { return schedule_; }
  int rank() const { return rank_; }

 private:
  using Key = std::tuple<int, int, int, int>;  // payload, flow, producing stage, micro-batch
  Key key_of(Payload payload, int flow, int stage, int mb) const { return {static_cast<int>(payload), flow, stage, mb}; }
  void run_p2p(const Instruction& op);
  Tensor take(const Key& k, const char* what);
  void put(const Key& k, Tensor t);

  Schedule schedule_;
  int rank_;
  PipelineTransport* transport_;
  CommScheduler* scheduler_;
  PipelineCompute* compute_ = nullptr;  // during run()
  // Per chunk: the position of the instruction after which its weight gradients are complete.
  std::vector<int> last_weight_;
  // Tensors produced here and not yet sent or taken (outputs, input gradients) and tensors
  // received or handed over and not yet used, by the message they are.
  std::map<Key, Tensor> ready_;
  struct InFlight {
    CommScheduler::Ticket ticket;
    Tensor tensor;  // kept alive until its transfer is done
  };
  std::vector<InFlight> sends_;
};

}  // namespace tetra
