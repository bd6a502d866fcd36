// The argument checks of the mixture-of-experts ops (runtime/ops.h), the same for every backend:
// shapes, the int32 and fp32 tensors whose dtype is fixed, the routing configuration, aliasing, one
// device. Errors name the op and the tensor. Each backend checks what it alone requires of the
// activation tensors (the CPU: fp32; CUDA: a CUDA float tensor).
#pragma once
#include <cstdint>

#include "runtime/ops.h"

namespace tetra {

struct MoeRouterDims {
  int64_t N, E, k;
  int64_t group_size;  // experts per group (E / n_group)
};

// The routing configuration for E experts; fails naming `op` and the bad field.
void check_moe_routing(const char* op, const ops::MoeRouting& r, int64_t E);

MoeRouterDims check_moe_router_forward(const char* op, const Tensor& expert_ids, const Tensor& weights,
                                       const Tensor& counts, const Tensor& logits, const Tensor& bias,
                                       const ops::MoeRouting& r, const Tensor* load);
// Returns the dims; *seq_len = N / B when d_prob_sums is given (else 0).
MoeRouterDims check_moe_router_backward(const char* op, const Tensor& d_logits, const Tensor& d_weights,
                                        const Tensor& logits, const Tensor& expert_ids, const ops::MoeRouting& r,
                                        const Tensor* d_prob_sums, int64_t* seq_len);
// Returns B = N / seq_len.
int64_t check_moe_balance_loss(const char* op, const Tensor& loss_sum, const Tensor& d_prob_sums,
                               const Tensor& logits, const Tensor& expert_ids, int64_t seq_len);
void check_moe_bias_update(const char* op, const Tensor& bias, const Tensor& load, const Tensor* control);

struct MoeRowDims {
  int64_t N, k, R, d;  // tokens, slots per token, rows, row width
};
// Returns N, k, R = N·k; E = offsets.numel() − 1.
MoeRowDims check_moe_permute_map(const char* op, const Tensor& offsets, const Tensor& row_of, const Tensor& slot_of,
                                 const Tensor& expert_ids);
MoeRowDims check_moe_permute(const char* op, const Tensor& rows, const Tensor& x, const Tensor& slot_of,
                             int64_t top_k);
MoeRowDims check_moe_permute_backward(const char* op, const Tensor& dx, const Tensor& d_rows, const Tensor& row_of);
MoeRowDims check_moe_unpermute(const char* op, const Tensor& y, const Tensor& rows, const Tensor& weights,
                               const Tensor& row_of);
MoeRowDims check_moe_unpermute_backward(const char* op, const Tensor& d_rows, const Tensor& d_weights,
                                        const Tensor& dy, const Tensor& rows, const Tensor& weights,
                                        const Tensor& row_of);

// out, in [R, d], chunk_counts int32 [A, B]; returns R, d (and A, B through the pointers).
MoeRowDims check_moe_sort_chunks(const char* op, const Tensor& out, const Tensor& in, const Tensor& chunk_counts);
void check_moe_chunk_offsets(const char* op, const Tensor& offsets, const Tensor& chunk_counts);

struct MoeGemmDims {
  int64_t G, R, O, I;  // experts, rows, output and input features
};
// y [R, O], x [R, I], w [G, O, I], offsets int32 [G + 1]. coded (the FP8 ops): a row tensor that is
// only read (x; dy) may be undefined, its codes standing for it; R is then the other row tensor's.
MoeGemmDims check_moe_grouped_forward(const char* op, const Tensor& y, const Tensor& x, const Tensor& w,
                                      const Tensor& offsets, bool coded = false);
// dx [R, I], dy [R, O], w [G, O, I].
MoeGemmDims check_moe_grouped_backward_input(const char* op, const Tensor& dx, const Tensor& dy, const Tensor& w,
                                             const Tensor& offsets, bool coded = false);
// dw [G, O, I], dy [R, O], x [R, I] (coded: one of dy and x may be undefined).
MoeGemmDims check_moe_grouped_backward_weight(const char* op, const Tensor& dw, const Tensor& dy, const Tensor& x,
                                              const Tensor& offsets, bool coded = false);

}  // namespace tetra
