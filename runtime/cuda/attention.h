// Causal self-attention on CUDA: the two implementations behind tetra::cuda::attention_forward /
// attention_backward (runtime/cuda/cuda_ops.h), exposed so tests and benchmarks can call each one.
//   cuDNN  — fused flash attention (SDPA) built through cuDNN's graph API; bf16 only.
//            attention_cudnn_cuda.cpp (graphs) over attention_cudnn_graph_cuda.cpp (backend plumbing)
//   reference — plain CUDA kernels, fp32 math, fp32 or bf16 tensors, deterministic.
//            attention_reference.cu
// Dispatch (attention_cuda.cpp): bf16 → cuDNN, fp32 → reference. TETRA_ATTENTION=reference forces the
// reference kernels for bf16 too; TETRA_ATTENTION=cudnn refuses the fallback where cuDNN cannot run.
// Contract (same as runtime/ops.h): qkv[B, T, (H + 2·Hkv)·D] = H q heads | Hkv k heads | Hkv v heads per
// token, each D values, query head h reading key/value head h / (H / Hkv) (Hkv = H: plain multi-head);
// out[B, T, H·D]; lse[B, H, T] fp32 = log Σ_j exp(s·q·k_j) over j ≤ i (natural log), s = 1/√D.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "runtime/attention_shape.h"
#include "runtime/tensor.h"

namespace tetra::cuda {

using tetra::AttentionDims;

// Argument checks shared by every implementation: a CUDA fp32/bf16 qkv, then the shapes every
// backend checks (runtime/attention_shape.h); errors name the op and the offending tensor.
AttentionDims check_attention_forward(const char* op, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                                      int64_t n_heads, int64_t n_kv_heads);
AttentionDims check_attention_backward(const char* op, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                       const Tensor& out, const Tensor& lse, int64_t n_heads, int64_t n_kv_heads);

// ---------- reference kernels (fp32 or bf16 tensors, D ≤ 256) ----------
void attention_forward_reference(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads);
void attention_backward_reference(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                  const Tensor& lse, int64_t n_heads, int64_t n_kv_heads);

// ---------- cuDNN fused attention (bf16) ----------
// Why the cuDNN path cannot take these tensors, or "" if it can: dtype, head dim, sequence length,
// 16-byte alignment of qkv and of the other operands, cuDNN version, GPU generation.
std::string cudnn_attention_unsupported(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads,
                                        std::initializer_list<const Tensor*> operands);
void attention_forward_cudnn(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads);
void attention_backward_cudnn(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              const Tensor& lse, int64_t n_heads, int64_t n_kv_heads);
// How the cached plan for this call was chosen (heuristics mode, engine, tuning), e.g. for
// benchmarks; builds the plan if it is not cached yet.
std::string cudnn_attention_plan_info(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, bool backward);

// Engine tuning of the cuDNN plans. The mode starts from the environment variable TETRA_ATTENTION_TUNE:
//   unset, "0" or "off"  Off: the first engine config cuDNN's heuristics rank that finalizes;
//   "1" or "on"          On: every finalizing config (up to 8) is timed on the first uncaptured call
//                        of each shape and direction, on that call's own tensors, and the fastest is
//                        kept (the first one unless another is at least 1% faster);
//   "verbose"            On, and print each candidate's time to stderr.
// Any other value fails at the first cuDNN attention call. Plans built before a change keep theirs.
enum class AttentionTuning { Off, On, Verbose };
AttentionTuning attention_tuning();
void set_attention_tuning(AttentionTuning mode);

// ---------- dispatch ----------
enum class AttentionImpl { Cudnn, Reference };
const char* attention_impl_name(AttentionImpl impl);
// The implementation a call with these tensors gets under the current TETRA_ATTENTION setting.
AttentionImpl attention_impl_for(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads,
                                 std::initializer_list<const Tensor*> operands);

}  // namespace tetra::cuda
