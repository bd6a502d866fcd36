// Building blocks shared by the model layers: a dense projection, a LayerNorm and an RMSNorm, each
// owning its Params and calling the op library (the projection, under tensor parallelism, the
// tensor-parallel steps its style names). They hold no activations (those live in the
// layer's slot).
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "models/fp8_linear.h"
#include "models/fp8_tensor_parallel.h"
#include "models/tp_style.h"
#include "parallel/param.h"
#include "parallel/tensor/tensor_parallel.h"
#include "runtime/ops.h"

namespace tetra {

struct TensorParallelPlan;

// y[N, out] = x[N, in] · Wᵀ + b, W stored [out, in]. Under tensor parallelism the layer runs in
// the style its weight's entry in the model's plan gives (set_tensor_parallel; Megatron-LM's
// column- and row-parallel linear, parallel/tensor/tensor_parallel.h), else — no group, or any
// other style — as the plain op:
//   ColumnParallel  W [O/tp, I], b [O/tp]: reads the stream (x [R, I], R = N/tp under sequence
//                   parallelism, else N), writes [N, O/tp]; its input gradient is reduced over tp.
//   RowParallel     W [O, I/tp], b [O]: reads [N, I/tp], writes the stream [R, O], reduced over tp.
// The methods below that name a style run either it or the plain op. Under an FP8 recipe
// (set_fp8; models/fp8_linear.h) the plain layer runs its three GEMMs in FP8, the bias, GELU (and its
// backward) and residual in the GEMMs' epilogue (ops::Fp8Epilogue), as the working dtype's ops fuse them.
struct Linear {
  Param weight, bias;
  bool has_bias = true;

  // `name` is the PyTorch module path, e.g. "transformer.h.0.attn.c_attn"; GPT-2's Conv1D stores
  // the weight transposed ([in, out]) in checkpoints.
  void init(const std::string& name, int64_t out, int64_t in, bool bias, float init_std, bool conv1d_layout,
            int layer);
  void collect(std::vector<Param*>& out);
  int64_t out_features() const { return weight.local_shape[0]; }
  int64_t in_features() const { return weight.local_shape[1]; }
  // The style of `plan`'s entry for this weight, over `tp`'s group (null, or one rank: plain).
  void set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan);
  // The GEMMs in FP8 under `recipe` (None: the working dtype). Both widths must be multiples of
  // kFp8Multiple (a Config error naming the weight). Under tensor parallelism the tensor-parallel
  // steps run the recipe's GEMMs with the tp = 1 run's scales (models/fp8_tensor_parallel.h);
  // blockwise needs every slice of the weight a whole number of 128-wide groups (a Config error from
  // set_tensor_parallel otherwise).
  void set_fp8(Fp8Recipe recipe);
  Fp8Recipe fp8() const { return fp8_; }
  // Where the op writing this layer's input (gradient false) or output gradient may leave that
  // tensor's amax for the FP8 cast (models/fp8_linear.h fp8_amax_slot); null where none is taken.
  Tensor* fp8_amax_slot(Fp8Saved* fp8, bool gradient, Device device) const {
    return tp_ ? nullptr : tetra::fp8_amax_slot(fp8_, fp8, gradient, device);
  }
  // Whether fp8_amax_slot gives a slot: the plain layer under a recipe whose cast of that operand
  // takes its producer's amax.
  bool takes_fp8_amax(bool gradient) const { return !tp_ && fp8_takes_measured_amax(fp8_, gradient); }
  // Hands `amax` (U32 [1]; undefined: nothing to hand), which the op that wrote this layer's input
  // (gradient false) or output gradient measured as it wrote it, to the cast of that tensor — the
  // same slot fp8_amax_slot gives — where the layer takes one.
  void hand_fp8_amax(Fp8Saved* fp8, bool gradient, Tensor amax) const {
    if (fp8 && amax.defined() && takes_fp8_amax(gradient)) (gradient ? fp8->dy_amax : fp8->x_amax) = std::move(amax);
  }
  // Whether the layer's side of the stream is sequence-sharded: its stream rows R are N/tp, and the
  // [N, ·] tensor that side gathers (a column-parallel input, a row-parallel output gradient) is a
  // buffer of its own rather than the stream tensor itself.
  bool sequence_sharded() const { return tp_ && tp_->sequence_parallel(); }
  // Whether backward_weight is this rank's work alone (no tensor-parallel group, so no collective
  // inside it): such calls of different layers may run side by side (runtime/stream_fanout.h).
  bool weight_grad_is_local() const { return !tp_; }
  // Rows N of the [N, ·] side for stream rows R (R, or R·tp when sequence-sharded).
  int64_t full_rows(int64_t stream_rows) const { return sequence_sharded() ? stream_rows * tp_->size() : stream_rows; }

  // The [N, in] input that forward gathers into (x_full) and backward_weight reads, for stream input
  // x [R, in] and the Fp8Saved the forward gets: x itself when not sequence-sharded; undefined where
  // the FP8 recipe gathers the input's codes and keeps their transpose in fp8 instead
  // (fp8_tp::casts_before_gather); else a new buffer like x.
  Tensor gathered_input(const Tensor& x, const Fp8Saved* fp8) const {
    if (!sequence_sharded()) return x;
    if (fp8_tp::casts_before_gather(fp8_, fp8)) return Tensor();
    return Tensor::empty({full_rows(x.dim(0)), x.dim(1)}, x.dtype(), x.device());
  }
  // ColumnParallel or plain: y[N, out] = act(x·Wᵀ + b); pre_act as in ops::linear_forward. x_full
  // ([N, in], may be null): receives the gathered input when sequence-sharded (else x is whole),
  // unless the FP8 path keeps xᵀ in fp8 instead (gathered_input: x_full then undefined, not written).
  // fp8 (may be null): this micro-batch's Fp8Saved, which receives what the FP8 path keeps for the
  // weight gradient (every method below takes it; the working-dtype path ignores it).
  // y_amax (may be null; U32 [1]): receives the largest |y| as stored — the next layer's fp8_amax_slot,
  // measured in the plain FP8 layer's epilogue (else by a pass over y).
  void forward(Tensor& y, const Tensor& x, Tensor* x_full = nullptr, ops::Activation act = ops::Activation::None,
               Tensor* pre_act = nullptr, Fp8Saved* fp8 = nullptr, Tensor* y_amax = nullptr) const;
  // RowParallel or plain: y = x·Wᵀ + b + residual, the residual connection fused into the GEMM (and
  // into the reduction over tp); y may be the residual.
  void forward_residual(Tensor& y, const Tensor& x, const Tensor& residual, Fp8Saved* fp8 = nullptr) const;
  // ColumnParallel or plain: dx[R, in] (+)= dy[N, out] · W, reduced over tp. `overlap` (may be
  // empty): work that does not read dx — the layer's weight gradients — run while the reduction
  // moves; the plain op runs no such work. Returns whether it ran `overlap`. accumulate: plain only.
  bool backward_input(Tensor& dx, const Tensor& dy, const std::function<void()>& overlap = {},
                      bool accumulate = false, Fp8Saved* fp8 = nullptr) const;
  // RowParallel or plain (forward_residual's): dx[N, in] = dy · W, times gelu'(gelu_pre) when given
  // (the input was gelu(gelu_pre)). dy [R, out]; dy_full ([N, out], may be null) receives it
  // gathered when sequence-sharded. dx_amax (may be null): as forward's y_amax, for dx.
  void backward_input_residual(Tensor& dx, const Tensor& dy, Tensor* dy_full = nullptr,
                               const Tensor* gelu_pre = nullptr, Fp8Saved* fp8 = nullptr,
                               Tensor* dx_amax = nullptr) const;
  // Gradients accumulate over micro-batches. dy_sum (fp32 [out], may be undefined): Σ_n dy[n, :]
  // if already known, which the bias gradient then takes instead of reading dy again.
  void backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dy_sum = Tensor(), Fp8Saved* fp8 = nullptr);
  // forward_residual's weight gradients: dw from dy_full [N, out] (the gathered dy when
  // sequence-sharded, else dy itself) and x [N, in]; a sequence-sharded row-parallel layer's
  // replicated bias from this rank's rows dy [R, out] only (their column sum dy_sum if known), as its
  // gradient is summed over tp afterwards (ParamPlacement::grad_over_tp).
  void backward_weight_residual(const Tensor& dy_full, const Tensor& x, const Tensor& dy, const Tensor& dy_sum,
                                Fp8Saved* fp8 = nullptr);

 private:
  // The plain layer under fp8_: y = act(x·Wᵀ + b) or x·Wᵀ + b + residual, as ops::linear_forward, all
  // in the GEMM's epilogue; y_amax (may be null) receives y's amax.
  void fp8_forward(Tensor& y, const Tensor& x, ops::Activation act, Tensor* pre_act, const Tensor* residual,
                   Fp8Saved* keep, Tensor* y_amax = nullptr) const;
  // bias.grad += Σ_n dy[n, :] (dy_sum when defined).
  void bias_grad(const Tensor& dy, const Tensor& dy_sum);
  // Blockwise under tp: this rank's slice holds whole 128-wide groups of the full weight.
  void check_fp8_blocks_under_tp() const;
  // How the stream side's tensor (a column-parallel input, a row-parallel output gradient) lies over
  // the tp group: split when sequence-sharded, else whole on every rank.
  fp8_tp::Part stream_part() const { return sequence_sharded() ? fp8_tp::Part::Split : fp8_tp::Part::Whole; }

  TensorParallel* tp_ = nullptr;  // set where the style is column- or row-parallel
  TpStyle style_ = TpStyle::Replicated;
  Fp8Recipe fp8_ = Fp8Recipe::None;
};

struct LayerNorm {
  Param weight, bias;
  float eps = 1e-5f;

  void init(const std::string& name, int64_t channels, float epsilon, int layer);
  void collect(std::vector<Param*>& out);
  // y_amax (may be null; U32 [1]): receives the largest |y| as stored — the next projection's
  // Linear::fp8_amax_slot, measured as y is written.
  void forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, Tensor* y_amax = nullptr) const {
    ops::layernorm_forward(y, mean, rstd, x, weight.value, bias.value, eps, y_amax);
  }
  // dx (+)= ...; the weight gradients accumulate. dx_sum (fp32 [C], optional) receives Σ_n dx[n, :];
  // dx_rounded (optional, dy's dtype) dx's values rounded to its dtype (ops.h).
  // dx_amax (optional, U32 [1]): the largest |value| of dx_rounded if given, else of dx, as stored
  // (ops.h) — the amax the FP8 cast of the projection that reads that gradient takes.
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                bool accumulate_dx, Tensor* dx_sum = nullptr, Tensor* dx_rounded = nullptr,
                Tensor* dx_amax = nullptr) {
    ops::layernorm_backward(dx, weight.grad, bias.grad, dy, x, weight.value, mean, rstd, accumulate_dx, nullptr,
                            dx_sum, dx_rounded, dx_amax);
  }
  // dx = dresidual + the gradient through the LayerNorm (x also feeds the residual stream).
  void backward_residual(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dresidual, Tensor* dx_sum = nullptr, Tensor* dx_rounded = nullptr,
                         Tensor* dx_amax = nullptr) {
    ops::layernorm_backward(dx, weight.grad, bias.grad, dy, x, weight.value, mean, rstd, false, &dresidual, dx_sum,
                            dx_rounded, dx_amax);
  }
};

// Hugging Face LlamaRMSNorm: y = x · rstd · w, no bias.
struct RMSNorm {
  Param weight;
  float eps = 1e-5f;

  void init(const std::string& name, int64_t channels, float epsilon, int layer);
  void collect(std::vector<Param*>& out) { out.push_back(&weight); }
  // y_amax (may be null): as LayerNorm::forward's; y_row_amax (may be null): each row's (ops.h).
  void forward(Tensor& y, Tensor& rstd, const Tensor& x, Tensor* y_amax = nullptr, Tensor* y_row_amax = nullptr) const {
    ops::rmsnorm_forward(y, rstd, x, weight.value, eps, y_amax, y_row_amax);
  }
  // dx = dresidual + the gradient through the norm (x also feeds the residual stream); the weight
  // gradient accumulates. dx_rounded (optional, dy's dtype): dx's values rounded to its dtype (ops.h).
  // dx_amax (optional): as LayerNorm::backward's; dx_row_amax (optional): each row's (ops.h).
  void backward_residual(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& dresidual,
                         Tensor* dx_rounded = nullptr, Tensor* dx_amax = nullptr, Tensor* dx_row_amax = nullptr) {
    ops::rmsnorm_backward(dx, weight.grad, dy, x, weight.value, rstd, false, &dresidual, dx_rounded, dx_amax,
                          dx_row_amax);
  }
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& rstd, Tensor* dx_rounded = nullptr,
                Tensor* dx_amax = nullptr, Tensor* dx_row_amax = nullptr) {
    ops::rmsnorm_backward(dx, weight.grad, dy, x, weight.value, rstd, false, nullptr, dx_rounded, dx_amax,
                          dx_row_amax);
  }
};

}  // namespace tetra
