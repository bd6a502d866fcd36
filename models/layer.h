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

class MoeMlp;   // models/moe_mlp.h
class KvCache;  // models/kv_cache.h

// What a layer keeps between its forward and backward for one micro-batch.
struct Activations {
  virtual ~Activations() = default;
};

// Activation recomputation, per layer: keep everything, recompute the MLP's hidden activations,
// or keep only the layer input and recompute the whole forward during backward.
enum class Recompute { None, Mlp, Full };

// The residual stream's gradient as a block's backward writes it: `grad` in the stream's dtype and
// `rounded`, the same values in the activation dtype for the GEMMs that read it (the output
// projections' input and weight gradients). When the two dtypes agree, `rounded` is `grad` itself.
// `amax` (U32 [1], where asked for: MicroBatchContext::stream_gradient) receives the largest |value|
// of `rounded` as stored, for the tensorwise FP8 cast of the output gradient of a projection that
// wrote into the stream (Linear::hand_fp8_amax), so that cast skips its own pass over it.
// `row_amax` (U32 [rows], where asked for) receives each row's, for the routed experts' cast of a MoE
// block's output gradient (ops::moe_permute_fp8_cast's token_amax).
struct StreamGradient {
  Tensor grad, rounded, amax, row_amax;
  // The norm backward's second output (ops.h dx_rounded): null when there is nothing to round.
  Tensor* rounded_output() { return rounded.data_ptr() == grad.data_ptr() ? nullptr : &rounded; }
  // The norm backward's dx_amax output (ops.h): null when not asked for.
  Tensor* amax_output() { return amax.defined() ? &amax : nullptr; }
  // The norm backward's dx_row_amax output (ops.h): null when not asked for.
  Tensor* row_amax_output() { return row_amax.defined() ? &row_amax : nullptr; }
};

// What the producer of a residual-stream gradient hands to its consumer with it (see
// MicroBatchContext::offer_grad): its column sum, its copy in the activation dtype, and the amax of
// that copy.
struct GradCompanions {
  Tensor column_sum;  // fp32 [C] Σ_n grad[n, :], or undefined
  Tensor rounded;     // grad rounded to the activation dtype, or undefined (the dtypes agree)
  Tensor amax;        // U32 [1]: StreamGradient::amax (of rounded, or of grad when the dtypes agree), or undefined
  Tensor row_amax;    // U32 [rows]: StreamGradient::row_amax, or undefined
  // What the norm backward that wrote `g` offers with it; column_sum may be undefined.
  static GradCompanions of(StreamGradient& g, Tensor column_sum = Tensor()) {
    return {std::move(column_sum), g.rounded_output() ? g.rounded : Tensor(), g.amax, g.row_amax};
  }
};

class MicroBatchContext {
 public:
  // residual_dtype: the residual stream's (train.residual_dtype); the activation dtype by default.
  MicroBatchContext(Device device, DType dtype) : MicroBatchContext(device, dtype, dtype) {}
  MicroBatchContext(Device device, DType dtype, DType residual_dtype)
      : device_(device), dtype_(dtype), residual_dtype_(residual_dtype) {}
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }  // activation dtype: fp32 on CPU, bf16 on CUDA
  // The hidden states between blocks (embedding output, block inputs and outputs, the head's input)
  // and their gradients: the activation dtype, or fp32 under train.residual_dtype fp32.
  DType residual_dtype() const { return residual_dtype_; }

  int64_t batch = 0;    // sequences in this micro-batch
  int64_t seq_len = 0;  // tokens per sequence
  int64_t tokens() const { return batch * seq_len; }
  Tensor ids;      // int32 [batch, seq_len] on device: inputs
  Tensor targets;  // int32 [batch, seq_len] on device: next tokens (−1: ignored)
  bool training = true;
  // Each layer's backward_weight runs right after its backward_input (no schedule that delays W):
  // a tensor-parallel layer may then compute its weight gradients inside backward_input, under the
  // reduce-scatter of an input gradient (parallel/tensor/linear.h), and its backward_weight only
  // releases the slot. Set by the caller of backward_input for each micro-batch's backward.
  bool weights_follow = false;
  // d(global mean loss)/d(per-token loss) = 1 / (tokens in the global batch).
  float loss_grad_scale = 1.0f;
  Tensor losses;  // fp32 [batch·seq_len], written by the loss layer
  // fp64 [1] on the device (undefined until a layer adds to it): auxiliary losses of this micro-
  // batch (the MoE balance loss), in units of the summed per-token losses, so the trainer adds it to
  // the loss sum it divides by the global batch's tokens.
  Tensor aux_loss;

  // Generation (models/generation.h): the keys and values of earlier positions, which this pass's
  // attention reads and extends (null in training and evaluation); `position` is where this pass's
  // tokens start in their sequences (rotary angles, learned positions). With targets undefined the
  // output layer writes `logits` fp32-or-activation-dtype [N, V] instead of the losses.
  KvCache* kv_cache = nullptr;
  int64_t position = 0;
  Tensor logits;

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
    offered_grad_ = Offered{};
  }

  // What the producer of the input gradient a backward_input returns hands to the layer below with
  // it. In a pre-norm model that gradient is the residual stream's; the producer's norm backward
  // writes, in the same pass, its column sum over tokens (the bias gradient of the projection below
  // that wrote into the stream) and its copy in the activation dtype (what that projection's GEMMs
  // read when the stream is fp32). The consumer gets them only for that same tensor (memory, shape
  // and dtype); otherwise (nothing offered, a gradient received from another pipeline stage) it
  // gets undefined tensors and computes what it needs from the gradient itself.
  void offer_grad(const Tensor& grad, GradCompanions companions) {
    offered_grad_ = {grad.data_ptr(), grad.shape(), grad.dtype(), std::move(companions)};
  }
  GradCompanions take_grad(const Tensor& grad) {
    Offered o = std::exchange(offered_grad_, Offered{});
    const bool same = grad.defined() && o.data == grad.data_ptr() && o.shape == grad.shape() && o.dtype == grad.dtype();
    return same ? std::move(o.companions) : GradCompanions{};
  }

  // A new activation tensor of this context's dtype and device.
  Tensor activation(const Shape& shape) const { return Tensor::empty(shape, dtype_, device_); }
  // `spare` (a tensor of this context's dtype the caller no longer needs, may be undefined) where its
  // shape is `shape`, else a new activation tensor.
  Tensor activation_reusing(const Tensor& spare, const Shape& shape) const {
    return spare.defined() && spare.dtype() == dtype_ && spare.shape() == shape ? spare : activation(shape);
  }
  Tensor fp32(const Shape& shape) const { return Tensor::empty(shape, DType::F32, device_); }
  // A new residual-stream tensor (residual_dtype()).
  Tensor residual(const Shape& shape) const { return Tensor::empty(shape, residual_dtype_, device_); }
  // A residual-stream gradient to be written, with its activation-dtype copy (one tensor when the
  // dtypes agree) and, with `amax`, its amax output (StreamGradient::amax); with `row_amax`, its rows'
  // (StreamGradient::row_amax).
  StreamGradient stream_gradient(const Shape& shape, bool amax = false, bool row_amax = false) const;
  // A stream gradient as the GEMMs read it: grad itself in the activation dtype, else `rounded`
  // (offered by its producer) or, when that is undefined, a copy rounded now.
  Tensor in_activation_dtype(const Tensor& grad, const Tensor& rounded) const;

 private:
  Device device_;
  DType dtype_;
  DType residual_dtype_;
  std::vector<std::unique_ptr<Activations>> slots_;
  struct Offered {
    const void* data = nullptr;
    Shape shape;
    DType dtype = DType::F32;
    GradCompanions companions;
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
