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
                        Tensor* dx_column_sum, Tensor* dx_rounded);
void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps);
void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      bool accumulate_dx, const Tensor* dresidual, Tensor* dx_rounded);
void rope_forward(Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, float theta);
void rope_backward(Tensor& dqkv, int64_t n_heads, int64_t n_kv_heads, float theta);
void swiglu_forward(Tensor& h, const Tensor& gate_up);
void swiglu_backward(Tensor& d_gate_up, const Tensor& dh, const Tensor& gate_up);
void moe_router_forward(Tensor& expert_ids, Tensor& weights, Tensor& counts, const Tensor& logits, const Tensor& bias,
                        const ops::MoeRouting& routing, Tensor* load);
void moe_router_backward(Tensor& d_logits, const Tensor& d_weights, const Tensor& logits, const Tensor& expert_ids,
                         const ops::MoeRouting& routing, const Tensor* d_prob_sums, bool accumulate);
void moe_balance_loss(Tensor& loss_sum, Tensor& d_prob_sums, const Tensor& logits, const Tensor& expert_ids,
                      int64_t seq_len, float loss_scale, float grad_scale);
void moe_bias_update(Tensor& bias, const Tensor& load, float rate, const Tensor* control);
void moe_permute_map(Tensor& offsets, Tensor& row_of, Tensor& slot_of, const Tensor& expert_ids);
void moe_permute(Tensor& rows, const Tensor& x, const Tensor& slot_of, int64_t top_k);
void moe_permute_backward(Tensor& dx, const Tensor& d_rows, const Tensor& row_of, bool accumulate);
void moe_unpermute(Tensor& y, const Tensor& rows, const Tensor& weights, const Tensor& row_of, bool accumulate);
void moe_unpermute_backward(Tensor& d_rows, Tensor& d_weights, const Tensor& dy, const Tensor& rows,
                            const Tensor& weights, const Tensor& row_of);
void moe_sort_chunks(Tensor& out, const Tensor& in, const Tensor& chunk_counts, bool inverse);
void moe_chunk_offsets(Tensor& offsets, const Tensor& chunk_counts);
void moe_grouped_linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& offsets);
void moe_grouped_linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& offsets);
void moe_grouped_linear_backward_weight(Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& offsets,
                                        bool accumulate);
void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& wte, const Tensor& wpe, int64_t seq_len,
                       ops::VocabShard shard);
void embedding_backward(Tensor& dwte, Tensor* dwpe, const Tensor& dy, const Tensor& ids, int64_t seq_len,
                        ops::VocabShard shard);
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads);
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int64_t n_heads, int64_t n_kv_heads);
void softmax_cross_entropy(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                           float grad_scale);
void cross_entropy_shard_stats(Tensor& stats, const Tensor& logits, const Tensor& targets, ops::VocabShard shard);
void cross_entropy_from_stats(Tensor& losses, Tensor* dlogits, const Tensor& logits, const Tensor& targets,
                              ops::VocabShard shard, const Tensor& all_stats, float grad_scale);
void adamw_update(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h,
                  Tensor* working);
void sum_squares(Tensor& acc, const Tensor& x);
double sum_to_host(const Tensor& x);
void sum_accumulate(Tensor& acc, const Tensor& x);
void sum_partials(Tensor& out, const Tensor& parts, const Tensor& b, const Tensor* residual);
void step_control(Tensor& control, const Tensor& loss_sum, const Tensor& grad_sq, const Tensor& lr_table,
                  const StepControlConfig& cfg);

// Multi-tensor AdamW (runtime/multi_tensor.h): one launch per batch of up to 256 segments.
void adamw_update_multi(const std::vector<ops::AdamWSegment>& segments, const AdamWHyper& h,
                        const Tensor* control = nullptr);

}  // namespace tetra::cuda
