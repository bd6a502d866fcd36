// Building blocks shared by the model layers: a dense projection, a LayerNorm and an RMSNorm, each
// owning its Params and calling the op library. They hold no activations (those live in the
// layer's slot).
#pragma once
#include <string>
#include <vector>

#include "parallel/param.h"
#include "runtime/ops.h"

namespace tetra {

// y[N, out] = x[N, in] · Wᵀ + b, W stored [out, in].
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

  void forward(Tensor& y, const Tensor& x, ops::Activation act = ops::Activation::None,
               Tensor* pre_act = nullptr) const {
    ops::linear_forward(y, x, weight.value, has_bias ? bias.value : Tensor(), act, pre_act);
  }
  // y = x·Wᵀ + b + residual: the residual connection fused into the GEMM.
  void forward_residual(Tensor& y, const Tensor& x, const Tensor& residual) const {
    ops::linear_forward(y, x, weight.value, has_bias ? bias.value : Tensor(), ops::Activation::None, nullptr,
                        &residual);
  }
  void backward_input(Tensor& dx, const Tensor& dy, bool accumulate = false) const {
    ops::linear_backward_input(dx, dy, weight.value, accumulate);
  }
  // dx = (dy · W) ⊙ gelu'(gelu_pre), for a layer whose input was gelu(gelu_pre).
  void backward_input_gelu(Tensor& dx, const Tensor& dy, const Tensor& gelu_pre) const {
    ops::linear_backward_input_gelu(dx, dy, weight.value, gelu_pre);
  }
  // Gradients accumulate over micro-batches. dy_sum (fp32 [out], may be undefined): Σ_n dy[n, :]
  // if already known, which the bias gradient then takes instead of reading dy again.
  void backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dy_sum = Tensor()) {
    ops::linear_backward_weight(weight.grad, has_bias ? &bias.grad : nullptr, dy, x, /*accumulate=*/true,
                                has_bias && dy_sum.defined() ? &dy_sum : nullptr);
  }
  // A row-parallel layer under sequence parallelism: dw from the gathered dy_full [N, O] and x
  // [N, I/tp]; the replicated bias from this rank's rows dy_rows [N/tp, O] only (their column sum
  // dy_rows_sum if known), as its gradient is summed over tp afterwards (ParamPlacement::grad_over_tp).
  void backward_weight_rows(const Tensor& dy_full, const Tensor& x, const Tensor& dy_rows, const Tensor& dy_rows_sum);
};

struct LayerNorm {
  Param weight, bias;
  float eps = 1e-5f;

  void init(const std::string& name, int64_t channels, float epsilon, int layer);
  void collect(std::vector<Param*>& out);
  void forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x) const {
    ops::layernorm_forward(y, mean, rstd, x, weight.value, bias.value, eps);
  }
  // dx (+)= ...; the weight gradients accumulate. dx_sum (fp32 [C], optional) receives Σ_n dx[n, :];
  // dx_rounded (optional, dy's dtype) dx's values rounded to its dtype (ops.h).
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                bool accumulate_dx, Tensor* dx_sum = nullptr, Tensor* dx_rounded = nullptr) {
    ops::layernorm_backward(dx, weight.grad, bias.grad, dy, x, weight.value, mean, rstd, accumulate_dx, nullptr,
                            dx_sum, dx_rounded);
  }
  // dx = dresidual + the gradient through the LayerNorm (x also feeds the residual stream).
  void backward_residual(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dresidual, Tensor* dx_sum = nullptr, Tensor* dx_rounded = nullptr) {
    ops::layernorm_backward(dx, weight.grad, bias.grad, dy, x, weight.value, mean, rstd, false, &dresidual, dx_sum,
                            dx_rounded);
  }
};

// Hugging Face LlamaRMSNorm: y = x · rstd · w, no bias.
struct RMSNorm {
  Param weight;
  float eps = 1e-5f;

  void init(const std::string& name, int64_t channels, float epsilon, int layer);
  void collect(std::vector<Param*>& out) { out.push_back(&weight); }
  void forward(Tensor& y, Tensor& rstd, const Tensor& x) const { ops::rmsnorm_forward(y, rstd, x, weight.value, eps); }
  // dx = dresidual + the gradient through the norm (x also feeds the residual stream); the weight
  // gradient accumulates. dx_rounded (optional, dy's dtype): dx's values rounded to its dtype (ops.h).
  void backward_residual(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& rstd, const Tensor& dresidual,
                         Tensor* dx_rounded = nullptr) {
    ops::rmsnorm_backward(dx, weight.grad, dy, x, weight.value, rstd, false, &dresidual, dx_rounded);
  }
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& rstd, Tensor* dx_rounded = nullptr) {
    ops::rmsnorm_backward(dx, weight.grad, dy, x, weight.value, rstd, false, nullptr, dx_rounded);
  }
};

}  // namespace tetra
