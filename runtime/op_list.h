// The op table's entries: every op of runtime/ops.h that the backends implement, by name. A use
// passes a macro X, called once per op in this order, e.g. to declare each backend's kernels with
// the op's type (runtime/cpu/cpu_ops.h, runtime/cuda/cuda_ops.h) or to fill a backend's table
// (runtime/op_table.h). Adding an op: declare it in ops.h, list it here, define it in each backend.
#pragma once

#define TETRA_OPS(X)                                                                                 \
  X(fill)                                                                                            \
  X(zero)                                                                                            \
  X(copy)                                                                                            \
  X(copy_columns)                                                                                    \
  X(add)                                                                                             \
  X(scale)                                                                                           \
  X(add_bias)                                                                                        \
  X(linear_forward)                                                                                  \
  X(linear_backward_input)                                                                           \
  X(linear_backward_input_gelu)                                                                      \
  X(linear_backward_weight)                                                                          \
  X(gelu_forward)                                                                                    \
  X(gelu_backward)                                                                                   \
  X(layernorm_forward)                                                                               \
  X(layernorm_backward)                                                                              \
  X(rmsnorm_forward)                                                                                 \
  X(rmsnorm_backward)                                                                                \
  X(rope_forward)                                                                                    \
  X(rope_backward)                                                                                   \
  X(attention_decode)                                                                                \
  X(swiglu_forward)                                                                                  \
  X(swiglu_backward)                                                                                 \
  X(moe_router_forward)                                                                              \
  X(moe_router_backward)                                                                             \
  X(moe_balance_loss)                                                                                \
  X(moe_bias_update)                                                                                 \
  X(moe_permute_map)                                                                                 \
  X(moe_permute)                                                                                     \
  X(moe_permute_backward)                                                                            \
  X(moe_unpermute)                                                                                   \
  X(moe_unpermute_backward)                                                                          \
  X(moe_sort_chunks)                                                                                 \
  X(moe_chunk_offsets)                                                                               \
  X(moe_grouped_linear_forward)                                                                      \
  X(moe_grouped_linear_backward_input)                                                               \
  X(moe_grouped_linear_backward_weight)                                                              \
  X(embedding_forward)                                                                               \
  X(embedding_backward)                                                                              \
  X(attention_forward)                                                                               \
  X(attention_backward)                                                                              \
  X(softmax_cross_entropy)                                                                           \
  X(cross_entropy_shard_stats)                                                                       \
  X(cross_entropy_from_stats)                                                                        \
  X(adamw_update)                                                                                    \
  X(fp8_quantize)                                                                                    \
  X(fp8_amax)                                                                                        \
  X(fp8_dequantize)                                                                                  \
  X(fp8_gemm)                                                                                        \
  X(moe_grouped_fp8_forward)                                                                         \
  X(moe_grouped_fp8_backward_input)                                                                  \
  X(moe_grouped_fp8_backward_weight)                                                                 \
  X(moe_grouped_fp8_cast)                                                                            \
  X(moe_permute_fp8_cast)                                                                            \
  X(fp8_slice_amax)                                                                                  \
  X(fp8_slice_quantize)                                                                              \
  X(fp8_transpose)                                                                                   \
  X(sum_squares)                                                                                     \
  X(sum_accumulate)                                                                                  \
  X(sum_to_host)                                                                                     \
  X(sum_partials)                                                                                    \
  X(step_control)
