// Layer: the unit of a model that pipeline schedules move around. Backward is split in two so that
// zero-bubble and DualPipe schedules can delay weight gradients into bubbles:
//   forward(ctx, x) → y            saves what backward needs in ctx
//   backward_input(ctx, dy) → dx   B: gradient of the input (and of cheap per-channel params)
//   backward_weight(ctx)           W: gradients of the weight matrices (the big GEMMs)
// All state of one micro-batch lives in its MicroBatchContext, so several can be in flight.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/param.h"
#include "runtime/tensor.h"

namespace tetra {

class MoeMlp;  // models/moe_mlp.h

// What a layer keeps between its forward and backward for one micro-batch.
struct Activations {
  virtual ~Activations() = default;
};

// Activation recomputation, per layer: keep everything, recompute the MLP's hidden activations,
// or keep only the layer input and recompute the whole forward during backward.
enum class Recompute { None, Mlp, Full };
Recompute recompute_from_name(const std::string& name);

class MicroBatchContext {
 public:
  MicroBatchContext(Device device, DType dtype) : device_(device), dtype_(dtype) {}
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }  // activation dtype: fp32 on CPU, bf16 on CUDA

  int64_t batch = 0;    // sequences in this micro-batch
  int64_t seq_len = 0;  // tokens per sequence
  int64_t tokens() const { return batch * seq_len; }
  Tensor ids;      // int32 [batch, seq_len] on device: inputs
  Tensor targets;  // int32 [batch, seq_len] on device: next tokens (−1: ignored)
  bool training = true;
  // d(global mean loss)/d(per-token loss) = 1 / (tokens in the global batch).
  float loss_grad_scale = 1.0f;
  Tensor losses;  // fp32 [batch·seq_len], written by the loss layer
  // fp64 [1] on the device (undefined until a layer adds to it): auxiliary losses of this micro-
  // batch (the MoE balance loss), in units of the summed per-token losses, so the trainer adds it to
  // the loss sum it divides by the global batch's tokens.
  Tensor aux_loss;

  // The slot of layer `index`, created on first use.
  template <class A>
  A& slot(int index) {
    if (static_cast<size_t>(index) >= slots_.size()) slots_.resize(static_cast<size_t>(index) + 1);
    if (!slots_[index]) slots_[index] = std::make_unique<A>();
    return static_cast<A&>(*slots_[index]);
  }
  void release(int index) {
    if (static_cast<size_t>(index) < slots_.size()) slots_[index].reset();
  }
  void clear() {
    slots_.clear();
    aux_loss = Tensor();
    offered_grad_ = OfferedSum{};
  }

  // The column sum over tokens (fp32 [C]) of the input gradient a backward_input returns, handed to
  // the layer below with it. In a pre-LN model that gradient is the residual stream's, and its
  // column sum is the bias gradient of the projection below that wrote into the stream, which the
  // producer's LayerNorm backward sums while it writes the gradient. The consumer takes the sum only
  // for that same tensor (memory, shape and dtype); otherwise (nothing offered, a gradient received
  // from another pipeline stage) it gets an undefined tensor and sums the gradient itself.
  void offer_grad_column_sum(const Tensor& grad, Tensor sum) {
    offered_grad_ = {grad.data_ptr(), grad.shape(), grad.dtype(), std::move(sum)};
  }
  Tensor take_grad_column_sum(const Tensor& grad) {
    OfferedSum o = std::exchange(offered_grad_, OfferedSum{});
    const bool same = o.sum.defined() && grad.defined() && o.data == grad.data_ptr() && o.shape == grad.shape() &&
                      o.dtype == grad.dtype();
    return same ? std::move(o.sum) : Tensor();
  }

  // A new activation tensor of this context's dtype and device.
  Tensor activation(const Shape& shape) const { return Tensor::empty(shape, dtype_, device_); }
  Tensor fp32(const Shape& shape) const { return Tensor::empty(shape, DType::F32, device_); }

 private:
  Device device_;
  DType dtype_;
  std::vector<std::unique_ptr<Activations>> slots_;
  struct OfferedSum {
    const void* data = nullptr;
    Shape shape;
    DType dtype = DType::F32;
    Tensor sum;
  } offered_grad_;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string name() const = 0;
  virtual std::vector<Param*> params() = 0;
  virtual Tensor forward(MicroBatchContext& ctx, const Tensor& x) = 0;
  virtual Tensor backward_input(MicroBatchContext& ctx, const Tensor& dy) = 0;
  virtual void backward_weight(MicroBatchContext& ctx) = 0;

  // Phases (ARCHITECTURE.md §3 "Mixture of experts"; models/layer_pass.h): a layer that exchanges
  // data mid-way (a MoE layer's dispatch and combine) runs its forward and its input backward in
  // phases; every phase but the last ends by issuing a collective that the next phase waits for, so
  // an executor with two micro-batches in flight can run the other's phase meanwhile. forward() and
  // backward_input() run all phases back to back; a layer that communicates nothing has one.
  virtual int forward_phases() const { return 1; }
  virtual int backward_phases() const { return 1; }
  // Phase `phase` of forward(ctx, x) (x: the layer's input, given to every phase); returns the
  // output after the last phase, an undefined tensor before. backward_phase likewise for
  // backward_input(ctx, dy).
  virtual Tensor forward_phase(MicroBatchContext& ctx, const Tensor& x, int phase) {
    (void)phase;
    return forward(ctx, x);
  }
  virtual Tensor backward_phase(MicroBatchContext& ctx, const Tensor& dy, int phase) {
    (void)phase;
    return backward_input(ctx, dy);
  }

  // The layer's mixture-of-experts MLP, if it has one (models/moe_mlp.h).
  virtual MoeMlp* moe() { return nullptr; }

  int index() const { return index_; }  // position in the model; also the activation slot
  void set_index(int i) { index_ = i; }
  Recompute recompute() const { return recompute_; }
  void set_recompute(Recompute r) { recompute_ = r; }

 protected:
  int index_ = 0;
  Recompute recompute_ = Recompute::None;
};

}  // namespace tetra
