#include "launch/train/model_stages.h"

#include <algorithm>
#include <string>

#include "runtime/ops.h"
#include "runtime/trace.h"

namespace tetra::launch {

ModelStages::ModelStages(const PipelineLayout& layout, int rank, std::vector<std::vector<Layer*>> chunk_layers,
                         DistributedOptimizer& optimizer, Device device, DType act_dtype, DType residual_dtype,
                         int64_t micro_batch, int64_t seq_len, int64_t width, int64_t boundary_rows)
    : layout_(layout),
      rank_(rank),
      chunk_layers_(std::move(chunk_layers)),
      optimizer_(optimizer),
      device_(device),
      act_dtype_(act_dtype),
      residual_dtype_(residual_dtype),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      width_(width),
      boundary_rows_(boundary_rows > 0 ? boundary_rows : micro_batch * seq_len) {
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
  it->second = std::make_unique<MicroBatchContext>(device_, act_dtype_, residual_dtype_);
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

const Layer& ModelStages::layer_at(int index) const {
  for (const std::vector<Layer*>& chunk : chunk_layers_)
    for (const Layer* l : chunk)
      if (l->index() == index) return *l;
  TETRA_FAIL(Internal, "pipeline rank ", rank_, " holds no layer ", index);
}

Tensor ModelStages::boundary_buffer(int chunk, int mb) {
  return Tensor::empty({boundary_rows_, width_}, residual_dtype_, device_);
}

LayerPass ModelStages::forward_pass(int chunk, int mb, const Tensor& input) {
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
    TETRA_CHECK(input.defined() && input.dim(0) == boundary_rows_, "pipeline rank ", rank_, ": F", chunk, ".", mb,
                " got no input of ", boundary_rows_, " tokens");
  }
  return LayerPass(chunk_layers_[c], ctx, LayerPass::Direction::Forward, first_[c] ? ctx.ids : input,
                   {[this](int l) { optimizer_.before_forward(l); }, [this](int l) { optimizer_.after_forward(l); }});
}

Tensor ModelStages::end_forward(int chunk, int mb, const LayerPass& pass) {
  MicroBatchContext& ctx = context(chunk, mb);
  Tensor x = pass.result();
  if (last_[static_cast<size_t>(chunk)]) {
    ops::sum_accumulate(loss_sum_, ctx.losses);  // on the device: no host synchronisation
    x = Tensor();
  }
  // The chunk's auxiliary losses (the MoE balance loss, training only), in the units of the loss sum;
  // the pipeline's loss sums are added over its ranks.
  if (ctx.aux_loss.defined()) ops::sum_accumulate(loss_sum_, ctx.aux_loss);
  if (!training_) close(chunk, mb);
  return x;
}

Tensor ModelStages::forward(int chunk, int mb, const Tensor& input) {
  LayerPass pass = forward_pass(chunk, mb, input);
  pass.run();
  return end_forward(chunk, mb, pass);
}

LayerPass ModelStages::backward_pass(int chunk, int mb, const Tensor& dy, bool weights, bool last) {
  MicroBatchContext& ctx = context(chunk, mb);
  // Layers may fold W into B when it follows at once (MicroBatchContext::weights_follow).
  ctx.weights_follow = weights;
  return LayerPass(chunk_layers_[static_cast<size_t>(chunk)], ctx, LayerPass::Direction::Backward, dy,
                   {[this](int l) { optimizer_.before_backward(l); },
                    [this, last](int l) {
                      if (after_weight_) after_weight_(layer_at(l));
                      optimizer_.after_backward(l, last);
                    }},
                   weights);
}

Tensor ModelStages::end_backward(int chunk, int mb, const LayerPass& pass, bool weights) {
  if (weights) close(chunk, mb);
  return first_[static_cast<size_t>(chunk)] ? Tensor() : pass.result();
}

Tensor ModelStages::backward(int chunk, int mb, const Tensor& dy, bool weights, bool last) {
  LayerPass pass = backward_pass(chunk, mb, dy, weights, last);
  pass.run();
  return end_backward(chunk, mb, pass, weights);
}

std::pair<Tensor, Tensor> ModelStages::forward_backward(int f_chunk, int f_mb, const Tensor& input, int b_chunk,
                                                        int b_mb, const Tensor& dy, bool last) {
  LayerPass f = forward_pass(f_chunk, f_mb, input);
  LayerPass b = backward_pass(b_chunk, b_mb, dy, /*weights=*/true, last);
  interleave(f, b);
  Tensor y = end_forward(f_chunk, f_mb, f);
  return {y, end_backward(b_chunk, b_mb, b, /*weights=*/true)};
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
