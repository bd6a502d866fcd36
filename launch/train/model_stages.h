// ModelStages: the model side of the pipeline executor (parallel/pipeline/executor.h) on one
// pipeline rank — the layers of its chunks (contiguous stages of the Model), a MicroBatchContext
// per (chunk, micro-batch) in flight, the optimizer's per-layer hooks around them (after_backward
// follows a layer's W: the "after W" that starts its gradient reduction), the micro-batches'
// token ids and targets, and the loss. A context lives from its forward to the end of its full
// backward or its W (training), or to the end of its forward (evaluation). Layers run phase by phase
// (models/layer_pass.h), so FB instructions interleave their two micro-batches.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "data/data_loader.h"
#include "models/layer_pass.h"
#include "models/model.h"
#include "parallel/distributed_optimizer.h"
#include "parallel/pipeline/executor.h"

namespace tetra::launch {

class ModelStages : public PipelineCompute {
 public:
  // chunk_layers[c]: the layers chunk c of this rank holds, in model order (the first chunk of
  // stage 0 starts with the embedding, the last stage ends with the output layer). A micro-batch
  // is [micro_batch, seq_len] tokens; what crosses a stage boundary (the residual stream and its
  // gradient) is [boundary_rows, width] at the residual stream's dtype (train.residual_dtype; the
  // activation dtype unless that is bf16 and the stream fp32): micro_batch·seq_len rows, or this
  // rank's 1/tp of them under tensor parallelism with sequence parallelism (boundary_rows 0:
  // micro_batch·seq_len).
  ModelStages(const PipelineLayout& layout, int rank, std::vector<std::vector<Layer*>> chunk_layers,
              DistributedOptimizer& optimizer, Device device, DType act_dtype, DType residual_dtype,
              int64_t micro_batch, int64_t seq_len, int64_t width, int64_t boundary_rows = 0);

  // A micro-batch by its number in the step (or evaluation batch): ids and targets, valid until
  // the next call.
  using BatchSource = std::function<data::LoadedBatch(int micro)>;
  // Before a run of the executor: training (else evaluation), where micro-batches come from, the
  // fp64 [1] device tensor the per-token losses are summed into, and d(loss)/d(per-token loss).
  void begin(bool training, BatchSource batches, Tensor loss_sum, float loss_grad_scale);
  // After it: every context must have ended.
  void end();

  // The most contexts alive at once since construction (or reset_peak()): the activations this
  // rank held at its peak, in (chunk, micro-batch) units as the simulator counts them.
  int peak_contexts() const { return peak_; }
  void reset_peak() { peak_ = 0; }
  // Called after each layer's weight gradient (fault drills poison one there).
  void set_after_weight(std::function<void(const Layer&)> hook) { after_weight_ = std::move(hook); }
  // Whether a chunk of this rank holds the first layer (token ids in) or the last (targets, loss).
  bool needs_inputs() const;
  bool needs_targets() const;

  Tensor boundary_buffer(int chunk, int mb) override;
  Tensor forward(int chunk, int mb, const Tensor& input) override;
  Tensor backward(int chunk, int mb, const Tensor& dy, bool weights, bool last) override;
  void weight(int chunk, int mb, bool last) override;
  // The forward of one micro-batch and the full backward of another interleaved at their layers'
  // exchanges (models/layer_pass.h: a MoE layer's dispatch and combine), so one's all-to-all runs
  // while the other computes; results bit for bit those of running them one after the other.
  std::pair<Tensor, Tensor> forward_backward(int f_chunk, int f_mb, const Tensor& input, int b_chunk, int b_mb,
                                             const Tensor& dy, bool last) override;

 private:
  // A pass of a chunk for one micro-batch, ready to run (the forward's context opened and fed), and
  // what follows it (the loss summed, the context closed where it ends).
  LayerPass forward_pass(int chunk, int mb, const Tensor& input);
  Tensor end_forward(int chunk, int mb, const LayerPass& pass);
  LayerPass backward_pass(int chunk, int mb, const Tensor& dy, bool weights, bool last);
  Tensor end_backward(int chunk, int mb, const LayerPass& pass, bool weights);
  MicroBatchContext& open(int chunk, int mb);
  const Layer& layer_at(int index) const;  // a layer of this rank's chunks by Layer::index
  MicroBatchContext& context(int chunk, int mb);
  void close(int chunk, int mb);

  PipelineLayout layout_;
  int rank_;
  std::vector<std::vector<Layer*>> chunk_layers_;
  std::vector<bool> first_, last_;  // per chunk: holds model stage 0 / the last stage
  DistributedOptimizer& optimizer_;
  Device device_;
  DType act_dtype_, residual_dtype_;
  int64_t micro_batch_, seq_len_, width_, boundary_rows_;
  bool training_ = true;
  BatchSource batches_;
  Tensor loss_sum_;
  float loss_grad_scale_ = 1.0f;
  std::function<void(const Layer&)> after_weight_;
  std::map<std::pair<int, int>, std::unique_ptr<MicroBatchContext>> contexts_;
  int peak_ = 0;
};

}  // namespace tetra::launch
