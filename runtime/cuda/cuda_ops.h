// CUDA kernels (bf16 storage, fp32 accumulation). Same contracts as runtime/ops.h.
#pragma once
#include <vector>

#include "runtime/multi_tensor.h"
#include "runtime/ops.h"

namespace tetra::cuda {

using ops::Activation;
using ops::AdamWHyper;

void fill(Tensor& x, float value);
void zero(Tensor& x);
void copy(Tensor& dst, const Tensor& src);
void add(Tensor& y, const Tensor& a, const Tensor& b);
void scale(Tensor& x, float s);
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                    Tensor* pre_act, const Tensor* residual);
void linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, bool accumulate);
void linear_backward_input_gelu(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& gelu_pre);
void linear_backward_weight(Tensor& dw, Tensor* db, const Tensor& dy, const Tensor& x, bool accumulate,
                            const Tensor* dy_column_sum);
void gelu_forward(Tensor& y, const Tensor& x);
void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x);
void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps);
void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd, bool accumulate_dx, const Tensor* dresidual,
                        Tensor* dx_column_sum);
void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps);
void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      bool accumulate_dx, const Tensor* dresidual);
void rope_forward(Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, float theta);
void rope_backward(Tensor& dqkv, int64_t n_heads, int64_t n_kv_heads, float theta);
void swiglu_forward(Tensor& h, const Tensor& gate_up);
void swiglu_backward(Tensor& d_gate_up, const Tensor& dh, const Tensor& gate_up);
void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& wte, const Tensor& wpe, int64_t seq_len);
void embedding_backward(Tensor& dwte, Tensor* dwpe, const Tensor& dy, const Tensor& ids, int64_t seq_len);
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads);
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int64_t n_heads, int64_t n_kv_heads);
void softmax_cross_entropy(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                           float grad_scale);
void adamw_update(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h,
                  Tensor* working);
void sum_squares(Tensor& acc, const Tensor& x);
double sum_to_host(const Tensor& x);
void sum_accumulate(Tensor& acc, const Tensor& x);
void step_control(Tensor& control, const Tensor& loss_sum, const Tensor& grad_sq, const Tensor& lr_table,
                  const StepControlConfig& cfg);

// Multi-tensor AdamW (runtime/multi_tensor.h): one launch per batch of up to 256 segments.
void adamw_update_multi(const std::vector<ops::AdamWSegment>& segments, const AdamWHyper& h,
                        const Tensor* control = nullptr);

}  // namespace tetra::cuda
