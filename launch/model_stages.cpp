#include "launch/model_stages.h"

#include <algorithm>
#include <string>

#include "runtime/ops.h"
#include "runtime/trace.h"

namespace tetra::launch {

ModelStages::ModelStages(const PipelineLayout& layout, int rank, std::vector<std::vector<Layer*>> chunk_layers,
                         DistributedOptimizer& optimizer, Device device, DType act_dtype, int64_t micro_batch,
                         int64_t seq_len, int64_t width)
    : layout_(layout),
      rank_(rank),
      chunk_layers_(std::move(chunk_layers)),
      optimizer_(optimizer),
      device_(device),
      act_dtype_(act_dtype),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      width_(width) {
  TETRA_CHECK(static_cast<int>(chunk_layers_.size()) == layout.chunks(), "ModelStages: ", chunk_layers_.size(),
              " chunks of layers for a layout of ", layout.chunks());
  for (int c = 0; c < layout.chunks(); ++c) {
    TETRA_CHECK(!chunk_layers_[static_cast<size_t>(c)].empty(), "ModelStages: chunk ", c, " holds no layer");
    first_.push_back(layout.stage_of(rank, c) == 0);
    last_.push_back(layout.stage_of(rank, c) == layout.stages() - 1);
  }
}

bool ModelStages::needs_inputs() const { return std::find(first_.begin(), first_.end(), true) != first_.end(); }
bool ModelStages::needs_targets() const { return std::find(last_.begin(), last_.end(), true) != last_.end(); }

void ModelStages::begin(bool training, BatchSource batches, Tensor loss_sum, float loss_grad_scale) {
  TETRA_CHECK(contexts_.empty(), "ModelStages::begin with ", contexts_.size(), " micro-batches still in flight");
  training_ = training;
  batches_ = std::move(batches);
  loss_sum_ = std::move(loss_sum);
  loss_grad_scale_ = loss_grad_scale;
}

void ModelStages::end() {
  TETRA_CHECK(contexts_.empty(), "pipeline rank ", rank_, ": ", contexts_.size(),
              " micro-batches were forwarded but never finished (the schedule lacks their backward)");
  batches_ = nullptr;
  loss_sum_ = Tensor();
}

MicroBatchContext& ModelStages::open(int chunk, int mb) {
  auto [it, fresh] = contexts_.try_emplace({chunk, mb}, nullptr);
  TETRA_CHECK(fresh, "pipeline rank ", rank_, ": F", chunk, ".", mb, " runs twice");
  it->second = std::make_unique<MicroBatchContext>(device_, act_dtype_);
  peak_ = std::max(peak_, static_cast<int>(contexts_.size()));
  return *it->second;
}

MicroBatchContext& ModelStages::context(int chunk, int mb) {
  auto it = contexts_.find({chunk, mb});
  TETRA_CHECK(it != contexts_.end(), "pipeline rank ", rank_, ": a backward of ", chunk, ".", mb,
              " without its forward");
  return *it->second;
}

void ModelStages::close(int chunk, int mb) { contexts_.erase({chunk, mb}); }

Tensor ModelStages::boundary_buffer(int chunk, int mb) {
  return Tensor::empty({micro_batch_ * seq_len_, width_}, act_dtype_, device_);
}

Tensor ModelStages::forward(int chunk, int mb, const Tensor& input) {
  MicroBatchContext& ctx = open(chunk, mb);
  ctx.training = training_;
  ctx.loss_grad_scale = loss_grad_scale_;
  ctx.batch = micro_batch_;
  ctx.seq_len = seq_len_;
  const size_t c = static_cast<size_t>(chunk);
  if (first_[c] || last_[c]) {
    // The loader's buffers (or the step's copies), already on the device and ordered before this
    // stream's work; the output layer reads the targets in its forward and backward.
    data::LoadedBatch b = batches_(layout_.global_micro_batch(layout_.flow_of_chunk(chunk), mb));
    TETRA_CHECK(b.inputs.dim(0) == micro_batch_ && b.inputs.dim(1) == seq_len_, "pipeline rank ", rank_,
                ": micro-batch ", b.inputs.describe(), " is not [", micro_batch_, ", ", seq_len_, "]");
    if (first_[c]) ctx.ids = b.inputs;
    if (last_[c]) ctx.targets = b.targets;
  } else {
    TETRA_CHECK(input.defined() && input.dim(0) == micro_batch_ * seq_len_, "pipeline rank ", rank_, ": F", chunk,
                ".", mb, " got no input of ", micro_batch_ * seq_len_, " tokens");
  }
  const std::vector<Layer*>& layers = chunk_layers_[c];
  Tensor x = first_[c] ? ctx.ids : input;
  const bool tracing = Tracer::instance().enabled();
  for (Layer* l : layers) {
    optimizer_.before_forward(l->index());
    {
      TraceScope scope(tracing ? ("F " + l->name()).c_str() : "", "layer");
      x = l->forward(ctx, x);
    }
    optimizer_.after_forward(l->index());
  }
  if (last_[c]) {
    ops::sum_accumulate(loss_sum_, ctx.losses);  // on the device: no host synchronisation
    x = Tensor();
  }
  if (!training_) close(chunk, mb);
  return x;
}

Tensor ModelStages::backward(int chunk, int mb, const Tensor& dy, bool weights, bool last) {
  MicroBatchContext& ctx = context(chunk, mb);
  const std::vector<Layer*>& layers = chunk_layers_[static_cast<size_t>(chunk)];
  const bool tracing = Tracer::instance().enabled();
  Tensor g = dy;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    Layer* l = *it;
    optimizer_.before_backward(l->index());
    {
      TraceScope scope(tracing ? ("B " + l->name()).c_str() : "", "layer");
      g = l->backward_input(ctx, g);
    }
    if (!weights) continue;
    {
      TraceScope scope(tracing ? ("W " + l->name()).c_str() : "", "layer");
      l->backward_weight(ctx);
    }
    if (after_weight_) after_weight_(*l);
    optimizer_.after_backward(l->index(), last);
  }
  if (weights) close(chunk, mb);
  return first_[static_cast<size_t>(chunk)] ? Tensor() : g;
}

void ModelStages::weight(int chunk, int mb, bool last) {
  MicroBatchContext& ctx = context(chunk, mb);
  const std::vector<Layer*>& layers = chunk_layers_[static_cast<size_t>(chunk)];
  const bool tracing = Tracer::instance().enabled();
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    Layer* l = *it;
    {
      TraceScope scope(tracing ? ("W " + l->name()).c_str() : "", "layer");
      l->backward_weight(ctx);
    }
    if (after_weight_) after_weight_(*l);
    optimizer_.after_backward(l->index(), last);
  }
  close(chunk, mb);
}

}  // namespace tetra::launch
