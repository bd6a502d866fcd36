// tetra::cuda::attention_forward / attention_backward: argument checks and the choice between cuDNN's
// fused attention (bf16) and the reference kernels (fp32, and bf16 where cuDNN cannot run).
// TETRA_ATTENTION selects: unset/"auto" (cuDNN for bf16 where supported, else the reference with a
// one-time warning), "reference" (always the reference kernels), "cudnn" (bf16 must run on cuDNN:
// an unsupported call is an error instead of a fallback). fp32 always runs the reference kernels.
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "runtime/cuda/attention.h"
#include "runtime/cuda/cuda_ops.h"

namespace tetra::cuda {

namespace {

enum class Mode { Auto, Reference, Cudnn };

// Read on every call (a getenv), so tests and benchmarks can switch within one process.
Mode mode_from_env() {
  const char* v = std::getenv("TETRA_ATTENTION");
  if (!v || !*v) return Mode::Auto;
  const std::string s(v);
  if (s == "auto") return Mode::Auto;
  if (s == "reference") return Mode::Reference;
  if (s == "cudnn") return Mode::Cudnn;
  TETRA_FAIL(Usage, "TETRA_ATTENTION=", s, " is not a valid setting: use auto, reference or cudnn");
}

void warn_fallback_once(const std::string& why) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (!seen.insert(why).second) return;
  std::fprintf(stderr,
               "tetra: attention: cuDNN fused attention cannot run (%s); using the reference kernels "
               "(slower). Set TETRA_ATTENTION=reference to choose them explicitly.\n",
               why.c_str());
}

// What CUDA alone requires of qkv; the shapes are runtime/attention_shape.h's.
void check_cuda_qkv(const char* op, const Tensor& qkv) {
  if (!qkv.defined()) TETRA_FAIL(Internal, op, ": qkv is undefined");
  if (!qkv.device().is_cuda()) TETRA_FAIL(Internal, op, ": qkv ", qkv.describe(), " is not on a CUDA device");
  if (qkv.dtype() != DType::F32 && qkv.dtype() != DType::BF16)
    TETRA_FAIL(Internal, op, ": qkv must be fp32 or bf16, got ", qkv.describe());
}

}  // namespace

AttentionDims check_attention_forward(const char* op, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                                      int64_t n_heads, int64_t n_kv_heads) {
  check_cuda_qkv(op, qkv);
  return check_attention_forward_shapes(op, out, lse, qkv, n_heads, n_kv_heads);
}

AttentionDims check_attention_backward(const char* op, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                       const Tensor& out, const Tensor& lse, int64_t n_heads, int64_t n_kv_heads) {
  check_cuda_qkv(op, qkv);
  return check_attention_backward_shapes(op, dqkv, dout, qkv, out, lse, n_heads, n_kv_heads);
}

const char* attention_impl_name(AttentionImpl impl) {
  return impl == AttentionImpl::Cudnn ? "cudnn" : "reference";
}

AttentionImpl attention_impl_for(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads,
                                 std::initializer_list<const Tensor*> operands) {
  const Mode mode = mode_from_env();
  if (qkv.dtype() != DType::BF16 || mode == Mode::Reference) return AttentionImpl::Reference;
  if (mode == Mode::Cudnn) return AttentionImpl::Cudnn;  // unsupported calls fail there, with the reason
  const std::string why = cudnn_attention_unsupported(qkv, n_heads, n_kv_heads, operands);
  if (why.empty()) return AttentionImpl::Cudnn;
  warn_fallback_once(why);
  return AttentionImpl::Reference;
}

void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads) {
  check_attention_forward("attention_forward", out, lse, qkv, n_heads, n_kv_heads);
  if (attention_impl_for(qkv, n_heads, n_kv_heads, {&out, &lse}) == AttentionImpl::Cudnn)
    attention_forward_cudnn(out, lse, qkv, n_heads, n_kv_heads);
  else
    attention_forward_reference(out, lse, qkv, n_heads, n_kv_heads);
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int64_t n_heads, int64_t n_kv_heads) {
  check_attention_backward("attention_backward", dqkv, dout, qkv, out, lse, n_heads, n_kv_heads);
  if (attention_impl_for(qkv, n_heads, n_kv_heads, {&dqkv, &dout, &out, &lse}) == AttentionImpl::Cudnn)
    attention_backward_cudnn(dqkv, dout, qkv, out, lse, n_heads, n_kv_heads);
  else
    attention_backward_reference(dqkv, dout, qkv, out, lse, n_heads, n_kv_heads);
}

}  // namespace tetra::cuda
