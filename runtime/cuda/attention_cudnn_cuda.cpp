// bf16 causal attention through cuDNN's fused flash attention (SDPA), built with the graph API.
// cuDNN recognises the scaled-dot-product-attention pattern below and runs it as one fused kernel
// (no T×T matrix in memory). The graphs are the ones cuDNN's frontend lowers its SDPA node to for
// cuDNN 9.x (composite form: matmul → scale → causal mask → softmax with stats → matmul, and its
// backward), with the same virtual-tensor types and the same version workarounds.
//
// Q, K, V are strided views into qkv[B, T, W], W = (H + 2·Hkv)·D: three device pointers into one
// buffer (K and V offset by H·D and (H + Hkv)·D elements), Q dims [B, H, T, D], K and V dims
// [B, Hkv, T, D], strides [T·W, D, W, 1]. cuDNN's matmul takes Kᵀ, so K is described as dims
// [B, Hkv, D, T] with the last two strides swapped (and Vᵀ the same in the backward). dQ, dK, dV are
// written into dqkv through the same views. O and dO are [B, H, T, D] views of out[B, T, H·D]; Stats
// (= lse) is [B, H, T, 1] fp32.
// Grouped-query heads (Hkv < H) as cuDNN's frontend lowers them: the matmuls with K and V broadcast
// each key/value head over its H / Hkv query heads (no repeated K/V in memory), and the backward's dK
// and dV come from virtual per-query-head [B, H, T, D] products reduced (summed) over each group. With
// Hkv = H the graphs are exactly the multi-head ones (GPT-2's plans and numerics).
//
// One plan per (device, B, T, H, Hkv, D, direction), built on first use and cached with the workspace
// layout it needs: cuDNN's first-ranked engine config, or with TETRA_ATTENTION_TUNE the fastest of
// up to 8 configs, timed on the first uncaptured call (attention.h). Workspace memory: one buffer
// per (device, stream), grown to the largest plan run on that stream and reused by every later call
// (never allocated per call).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cuda/attention.h"
#include "runtime/cuda/attention_cudnn_graph.h"
#include "runtime/cuda/candidate_timing.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_context.h"

namespace tetra::cuda {

namespace {

using cudnn_graph::Dims;
using cudnn_graph::GraphBuilder;
using cudnn_graph::TensorRef;

constexpr cudnnDataType_t kBF16 = CUDNN_DATA_BFLOAT16;
constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;
constexpr cudnnDataType_t kI32 = CUDNN_DATA_INT32;
constexpr cudnnDataType_t kBool = CUDNN_DATA_BOOLEAN;

// UIDs of the tensors bound at execution (device pointers or host scalars).
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV,  // activations and gradients
  kAttnScale, kNegInf, kOne,                        // by-value fp32 scalars
  kSoftmaxSum, kDQAccum,                            // fp32 scratch in the workspace (backward)
  kSeqLenQ, kSeqLenKV,                              // int32 [B] = T (backward padding workaround)
};

// Dims and strides of every tensor of both graphs, from (B, T, H, Hkv, D).
struct Layout {
  int64_t B, T, H, Hkv, D;
  explicit Layout(const AttentionDims& d) : B(d.B), T(d.T), H(d.H), Hkv(d.Hkv), D(d.D) {}
  bool grouped() const { return Hkv != H; }
  int64_t qkv_row() const { return (H + 2 * Hkv) * D; }  // elements between tokens in qkv
  int64_t out_row() const { return H * D; }              // elements between tokens in out
  // Q (and dQ): [B, H, T, D] views into qkv / dqkv
  Dims head_dims() const { return {B, H, T, D}; }
  Dims qkv_strides() const { return {T * qkv_row(), D, qkv_row(), 1}; }
  // K, V (and dK, dV): [B, Hkv, T, D] views into qkv / dqkv, with Q's strides
  Dims kv_dims() const { return {B, Hkv, T, D}; }
  // Kᵀ, Vᵀ: [B, Hkv, D, T], the same memory with the last two strides swapped
  Dims kv_t_dims() const { return {B, Hkv, D, T}; }
  Dims qkv_t_strides() const { return {T * qkv_row(), D, 1, qkv_row()}; }
  // dK, dV per query head before the sum over each group (grouped only; virtual): packed [B, H, T, D]
  Dims full_head_strides() const { return {H * T * D, T * D, D, 1}; }
  // O, dO: [B, H, T, D] views into out / dout
  Dims out_strides() const { return {T * out_row(), D, out_row(), 1}; }
  // Stats, row max/sum, softmax_sum: [B, H, T, 1]
  Dims row_dims() const { return {B, H, T, 1}; }
  Dims row_strides() const { return {H * T, T, 1, 1}; }
  // attention scores S, P, dP, dS: [B, H, T, T] (virtual; never materialised)
  Dims score_dims() const { return {B, H, T, T}; }
  Dims score_strides() const { return {H * T * T, T * T, T, 1}; }
  Dims score_t_strides() const { return {H * T * T, T * T, 1, T}; }  // Pᵀ, dSᵀ
  // dQ accumulator: [B, H, T, D] fp32, packed
  Dims accum_strides() const { return {H * T * D, T * D, D, 1}; }
};

// What the installed cuDNN needs (versions as major·10000 + minor·100 + patch).
struct Quirks {
  float neg_inf;             // mask value: -inf from 9.10 on, lowest() before (as the frontend)
  bool padding_workaround;   // backward, 9.x ≤ 9.15 with T % 128 ≠ 0: full-length padding mask
  bool second_padding;       // 9.0 ≤ v < 9.10: padding applied again after the stats
  bool memset_dq_accum;      // before 9.6 the dQ accumulator must start at zero
};

Quirks quirks_for(int64_t version, int64_t T, bool backward) {
  Quirks q{};
  q.neg_inf = version < 91000 ? std::numeric_limits<float>::lowest() : -std::numeric_limits<float>::infinity();
  q.padding_workaround = backward && version <= 91500 && T % 128 != 0;
  q.second_padding = q.padding_workaround && version >= 90000 && version < 91000;
  q.memset_dq_accum = backward && version < 90600;
  return q;
}

// ---------- sub-graphs ----------

TensorRef like(GraphBuilder& g, const std::string& name, cudnnDataType_t dtype, const TensorRef& shape_of) {
  return g.virtual_tensor(name, dtype, shape_of.dims, shape_of.strides);
}

// Causal mask (top-left diagonal): keep x[.., i, j] where i ≥ j, else the mask value.
//   row = gen_index(x, axis 2)  col = gen_index(x, axis 3)  keep = row ≥ col  y = keep ? x : mask
TensorRef causal_mask(GraphBuilder& g, const TensorRef& x, const TensorRef& mask_value) {
  TensorRef row = like(g, "causal_row_index", kI32, x);
  TensorRef col = like(g, "causal_col_index", kI32, x);
  TensorRef keep = like(g, "causal_keep", kBool, x);
  TensorRef y = like(g, "causal_masked", kF32, x);
  g.gen_index("gen_row_index", 2, kF32, x, row);
  g.gen_index("gen_col_index", 3, kF32, x, col);
  g.pointwise("row_greater_equal_col", CUDNN_POINTWISE_CMP_GE, kBool, row, col, keep);
  g.pointwise("causal_select", CUDNN_POINTWISE_BINARY_SELECT, kF32, x, mask_value, keep, y);
  return y;
}

// Padding mask with per-batch lengths: keep x[b, .., i, j] where i < seq_q[b] and j < seq_kv[b].
TensorRef padding_mask(GraphBuilder& g, const std::string& tag, const TensorRef& x, const TensorRef& seq_q,
                       const TensorRef& seq_kv, const TensorRef& mask_value) {
  TensorRef row = like(g, tag + "_row_index", kI32, x);
  TensorRef col = like(g, tag + "_col_index", kI32, x);
  TensorRef row_ok = like(g, tag + "_row_in_range", kBool, x);
  TensorRef col_ok = like(g, tag + "_col_in_range", kBool, x);
  TensorRef keep = like(g, tag + "_keep", kBool, x);
  TensorRef y = like(g, tag + "_masked", kF32, x);
  g.gen_index(tag + "_gen_row_index", 2, kI32, x, row);
  g.gen_index(tag + "_gen_col_index", 3, kI32, x, col);
  g.pointwise(tag + "_row_lt_seq_q", CUDNN_POINTWISE_CMP_LT, kBool, row, seq_q, row_ok);
  g.pointwise(tag + "_col_lt_seq_kv", CUDNN_POINTWISE_CMP_LT, kBool, col, seq_kv, col_ok);
  g.pointwise(tag + "_and", CUDNN_POINTWISE_LOGICAL_AND, kBool, row_ok, col_ok, keep);
  g.pointwise(tag + "_select", CUDNN_POINTWISE_BINARY_SELECT, kF32, x, mask_value, keep, y);
  return y;
}

// Softmax over the last axis that also writes its statistics (the logsumexp of each row):
//   M = max(x)  E = exp(x − M)  Z = Σ E  Stats = M + log Z  P = E / Z
// P comes out in bf16: it is the A operand of the second matmul.
TensorRef softmax_with_stats(GraphBuilder& g, const Layout& L, const TensorRef& x, const TensorRef& stats) {
  TensorRef max = g.virtual_tensor("softmax_max", kF32, L.row_dims(), L.row_strides());
  TensorRef centered = like(g, "softmax_x_minus_max", kF32, x);
  TensorRef e = like(g, "softmax_exp", kF32, x);
  TensorRef sum = g.virtual_tensor("softmax_sum_exp", kF32, L.row_dims(), L.row_strides());
  TensorRef log_sum = g.virtual_tensor("softmax_log_sum_exp", kF32, L.row_dims(), L.row_strides());
  TensorRef p = like(g, "softmax_P", kBF16, x);
  g.reduction("softmax_reduce_max", CUDNN_REDUCE_TENSOR_MAX, x, max);
  g.pointwise("softmax_sub_max", CUDNN_POINTWISE_SUB, kF32, x, max, centered);
  g.pointwise("softmax_exp", CUDNN_POINTWISE_EXP, kF32, centered, e);
  g.reduction("softmax_reduce_sum", CUDNN_REDUCE_TENSOR_ADD, e, sum);
  g.pointwise("softmax_log", CUDNN_POINTWISE_LOG, kF32, sum, log_sum);
  g.pointwise("softmax_stats", CUDNN_POINTWISE_ADD, kF32, max, log_sum, stats);
  g.pointwise("softmax_div", CUDNN_POINTWISE_DIV, kF32, e, sum, p);
  return p;
}

// ---------- the two graphs ----------

std::string graph_name(const Layout& L, const char* direction) {
  return detail::concat("cuDNN SDPA ", direction, " [B=", L.B, ", T=", L.T, ", H=", L.H,
                        L.grouped() ? detail::concat(", Hkv=", L.Hkv) : std::string(), ", D=", L.D, ", bf16]");
}

// Forward:  S = Q·Kᵀ → S·scale → causal mask → softmax (Stats = lse) → O = P·V
std::vector<cudnn_graph::Plan> build_forward(cudnnHandle_t handle, const Layout& L, size_t max_plans) {
  GraphBuilder g(handle, graph_name(L, "forward"));
  TensorRef Q = g.device_tensor("Q", kQ, kBF16, L.head_dims(), L.qkv_strides());
  TensorRef Kt = g.device_tensor("K^T", kK, kBF16, L.kv_t_dims(), L.qkv_t_strides());
  TensorRef V = g.device_tensor("V", kV, kBF16, L.kv_dims(), L.qkv_strides());
  TensorRef O = g.device_tensor("O", kO, kBF16, L.head_dims(), L.out_strides());
  TensorRef stats = g.device_tensor("Stats", kStats, kF32, L.row_dims(), L.row_strides());
  TensorRef scale = g.scalar("attn_scale", kAttnScale);
  TensorRef mask_value = g.scalar("mask_value", kNegInf);

  // bmm1: S[B, H, T, T] = Q · Kᵀ (fp32)
  TensorRef S = g.virtual_tensor("S", kF32, L.score_dims(), L.score_strides());
  g.matmul("bmm1_Q_KT", Q, Kt, S);
  // S · attn_scale
  TensorRef S_scaled = like(g, "S_scaled", kF32, S);
  g.pointwise("attn_scale", CUDNN_POINTWISE_MUL, kF32, S, scale, S_scaled);
  // causal mask, then softmax writing Stats
  TensorRef S_masked = causal_mask(g, S_scaled, mask_value);
  TensorRef P = softmax_with_stats(g, L, S_masked, stats);
  // bmm2: O[B, H, T, D] = P · V
  g.matmul("bmm2_P_V", P, V, O);
  return g.build_plans(max_plans);
}

// Backward (FlashAttention-2 recurrence; P is recomputed from Stats):
//   softmax_sum = Σ_d dO ∘ O                      [B, H, T, 1] fp32 (workspace)
//   P  = exp(mask(scale·Q·Kᵀ) − Stats)
//   dV = Pᵀ · dO
//   dS = P ∘ (dO·Vᵀ − softmax_sum) · scale
//   dK = dSᵀ · Q                                   dQ = dS · K (fp32 accumulator, then bf16)
// Grouped (Hkv < H): dV and dK are the per-query-head products above, summed over each group.
std::vector<cudnn_graph::Plan> build_backward(cudnnHandle_t handle, const Layout& L, const Quirks& q,
                                              size_t max_plans) {
  GraphBuilder g(handle, graph_name(L, "backward"));
  TensorRef Q = g.device_tensor("Q", kQ, kBF16, L.head_dims(), L.qkv_strides());
  TensorRef Kt = g.device_tensor("K^T", kK, kBF16, L.kv_t_dims(), L.qkv_t_strides());
  TensorRef Vt = g.device_tensor("V^T", kV, kBF16, L.kv_t_dims(), L.qkv_t_strides());
  TensorRef O = g.device_tensor("O", kO, kBF16, L.head_dims(), L.out_strides());
  TensorRef dO = g.device_tensor("dO", kDO, kBF16, L.head_dims(), L.out_strides());
  TensorRef stats = g.device_tensor("Stats", kStats, kF32, L.row_dims(), L.row_strides());
  TensorRef dQ = g.device_tensor("dQ", kDQ, kBF16, L.head_dims(), L.qkv_strides());
  TensorRef dK = g.device_tensor("dK", kDK, kBF16, L.kv_dims(), L.qkv_strides());
  TensorRef dV = g.device_tensor("dV", kDV, kBF16, L.kv_dims(), L.qkv_strides());
  TensorRef scale = g.scalar("attn_scale", kAttnScale);
  TensorRef mask_value = g.scalar("mask_value", kNegInf);
  TensorRef one = g.scalar("one", kOne);
  TensorRef softmax_sum = g.device_tensor("softmax_sum", kSoftmaxSum, kF32, L.row_dims(), L.row_strides());
  TensorRef dQ_accum = g.device_tensor("dQ_accum", kDQAccum, kF32, L.head_dims(), L.accum_strides());
  TensorRef seq_q, seq_kv;
  const TensorRef* m_q = nullptr;   // matmul row/column overrides: only with the padding workaround
  const TensorRef* m_kv = nullptr;
  if (q.padding_workaround) {
    seq_q = g.device_tensor("seq_len_q", kSeqLenQ, kI32, {L.B, 1, 1, 1}, {1, 1, 1, 1});
    seq_kv = g.device_tensor("seq_len_kv", kSeqLenKV, kI32, {L.B, 1, 1, 1}, {1, 1, 1, 1});
    m_q = &seq_q;
    m_kv = &seq_kv;
  }

  // softmax_sum[B, H, T, 1] = Σ_d dO ∘ O  (· 1, the dropout-scale slot)
  TensorRef dO_O = g.virtual_tensor("dO_times_O", kF32, L.head_dims(),
                                    {L.H * L.T * L.D, L.T * L.D, L.H * L.D, 1});
  TensorRef dO_O_sum = g.virtual_tensor("dO_times_O_sum", kF32, L.row_dims(), L.row_strides());
  g.pointwise("mul_dO_O", CUDNN_POINTWISE_MUL, kF32, dO, O, dO_O);
  g.reduction("reduce_dO_O", CUDNN_REDUCE_TENSOR_ADD, dO_O, dO_O_sum);
  g.pointwise("scale_softmax_sum", CUDNN_POINTWISE_MUL, kF32, dO_O_sum, one, softmax_sum);

  // S = scale · Q·Kᵀ, masked; P = exp(S − Stats)
  TensorRef S = g.virtual_tensor("S", kF32, L.score_dims(), L.score_strides());
  g.matmul("matmul_Q_KT", Q, Kt, S, m_q, m_kv, nullptr);
  TensorRef S_scaled = like(g, "S_scaled", kF32, S);
  g.pointwise("mul_S_attn_scale", CUDNN_POINTWISE_MUL, kF32, S, scale, S_scaled);
  TensorRef S_cur = S_scaled;
  if (q.padding_workaround) S_cur = padding_mask(g, "padding", S_cur, seq_q, seq_kv, mask_value);
  TensorRef S_centered = like(g, "S_minus_stats", kF32, S);
  g.pointwise("sub_S_stats", CUDNN_POINTWISE_SUB, kF32, S_cur, stats, S_centered);
  S_cur = S_centered;
  if (q.second_padding) S_cur = padding_mask(g, "padding2", S_cur, seq_q, seq_kv, mask_value);
  S_cur = causal_mask(g, S_cur, mask_value);
  TensorRef P = like(g, "P", kF32, S);
  g.pointwise("exp_S", CUDNN_POINTWISE_EXP, kF32, S_cur, P);

  // dV[B, Hkv, T, D] = Pᵀ · dO (grouped: per query head, then summed over each group)
  TensorRef Pt = g.virtual_tensor("P^T", kBF16, L.score_dims(), L.score_t_strides());
  g.reshape("reshape_P", P, Pt);
  if (L.grouped()) {
    TensorRef dV_full = g.virtual_tensor("dV_full_heads", kBF16, L.head_dims(), L.full_head_strides());
    g.matmul("matmul_PT_dO", Pt, dO, dV_full, m_kv, nullptr, m_q);
    g.reduction("reduce_dV_heads", CUDNN_REDUCE_TENSOR_ADD, dV_full, dV);
  } else {
    g.matmul("matmul_PT_dO", Pt, dO, dV, m_kv, nullptr, m_q);
  }

  // dS = P ∘ (dO·Vᵀ − softmax_sum) · scale
  TensorRef dP = g.virtual_tensor("dP", kF32, L.score_dims(), L.score_strides());
  g.matmul("matmul_dO_VT", dO, Vt, dP, m_q, m_kv, nullptr);
  TensorRef dP_centered = like(g, "dP_minus_softmax_sum", kF32, dP);
  g.pointwise("sub_dP_softmax_sum", CUDNN_POINTWISE_SUB, kF32, dP, softmax_sum, dP_centered);
  TensorRef dS_unscaled = like(g, "dS_unscaled", kF32, dP);
  g.pointwise("mul_dP_P", CUDNN_POINTWISE_MUL, kF32, dP_centered, P, dS_unscaled);
  TensorRef dS = like(g, "dS", kF32, dP);
  g.pointwise("mul_dS_attn_scale", CUDNN_POINTWISE_MUL, kF32, dS_unscaled, scale, dS);

  // dK[B, Hkv, T, D] = dSᵀ · Q (grouped: per query head, then summed over each group)
  TensorRef dSt = g.virtual_tensor("dS^T", kBF16, L.score_dims(), L.score_t_strides());
  g.reshape("reshape_dS", dS, dSt);
  if (L.grouped()) {
    TensorRef dK_full = g.virtual_tensor("dK_full_heads", kBF16, L.head_dims(), L.full_head_strides());
    g.matmul("matmul_dST_Q", dSt, Q, dK_full, m_kv, nullptr, m_q);
    g.reduction("reduce_dK_heads", CUDNN_REDUCE_TENSOR_ADD, dK_full, dK);
  } else {
    g.matmul("matmul_dST_Q", dSt, Q, dK, m_kv, nullptr, m_q);
  }

  // dQ[B, H, T, D] = dS · K, accumulated in fp32 then converted
  TensorRef K = g.virtual_tensor("K", kF32, L.kv_dims(), L.qkv_strides());
  g.reshape("reshape_K", Kt, K);
  g.matmul("matmul_dS_K", dS, K, dQ_accum, m_q, nullptr, m_kv);
  g.pointwise("identity_dQ", CUDNN_POINTWISE_IDENTITY, kF32, dQ_accum, dQ);
  return g.build_plans(max_plans);
}

// ---------- tuning mode ----------

constexpr size_t kTuneCandidates = 8;
// One warm-up launch each, 3 interleaved rounds of ≈ 1 ms (runtime/cuda/candidate_timing.h).
constexpr CandidateTiming kTuneTiming{/*warmups=*/1, /*rounds=*/3, /*round_target_ms=*/1.0f, /*max_reps=*/20};
constexpr float kTuneSwitchMargin = 0.99f;  // another config must be at least 1% faster than the first

AttentionTuning tuning_from_env() {
  const char* v = std::getenv("TETRA_ATTENTION_TUNE");
  if (!v || !*v || std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0) return AttentionTuning::Off;
  if (std::strcmp(v, "1") == 0 || std::strcmp(v, "on") == 0) return AttentionTuning::On;
  if (std::strcmp(v, "verbose") == 0) return AttentionTuning::Verbose;
  TETRA_FAIL(Config, "TETRA_ATTENTION_TUNE='", v,
             "' is not an attention tuning mode: use 0 (off, the default), 1 (on) or verbose");
}

TuningMode<AttentionTuning> g_tuning{&tuning_from_env};

// ---------- plan cache, handles, workspaces ----------

struct PlanKey {
  int64_t B, T, H, Hkv, D;
  bool backward;
  auto operator<=>(const PlanKey&) const = default;
};

// The built plans (cuDNN's ranking; one unless tuning) and the workspace they run in:
// [dQ_accum | softmax_sum | cuDNN workspace (the largest any candidate needs)].
struct CachedPlan {
  std::vector<cudnn_graph::Plan> candidates;
  int best = 0;        // the candidate every call runs
  bool tuned = false;  // `best` is the measured choice (or tuning was given up)
  const cudnn_graph::Plan& plan() const { return candidates[static_cast<size_t>(best)]; }
  Quirks quirks{};
  int64_t dq_accum_offset = 0, dq_accum_bytes = 0;
  int64_t softmax_sum_offset = 0;
  int64_t cudnn_offset = 0;
  int64_t total_bytes = 0;
  void* seq_lens = nullptr;  // seq_len_q and seq_len_kv, int32 [B] each, all T (padding workaround)
};

struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// Per-device state, created on first use and kept for the life of the process: cuDNN handles and
// plans are not destroyed at exit, when the CUDA context may already be gone.
struct DeviceState {
  std::mutex mu;  // guards everything below and serialises cudnnSetStream + execute on the handle
  cudnnHandle_t handle = nullptr;
  std::map<PlanKey, std::unique_ptr<CachedPlan>> plans;
  std::map<cudaStream_t, Workspace> workspaces;
};

DeviceState& device_state(Device dev) {
  static std::mutex mu;
  static auto* states = new std::map<int, std::unique_ptr<DeviceState>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& s = (*states)[dev.index];
  if (!s) s = std::make_unique<DeviceState>();
  return *s;
}

int64_t align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Bytes from seq_len_q to seq_len_kv in CachedPlan::seq_lens (16-byte aligned, like every operand).
size_t seq_lens_kv_offset(int64_t B) { return (static_cast<size_t>(B) * sizeof(int32_t) + 15) / 16 * 16; }

// With st.mu held.
CachedPlan& plan_for(DeviceState& st, Device dev, const AttentionDims& d, bool backward, cudaStream_t stream) {
  if (!st.handle) TETRA_CUDNN_CHECK(cudnnCreate(&st.handle));
  const PlanKey key{d.B, d.T, d.H, d.Hkv, d.D, backward};
  auto it = st.plans.find(key);
  if (it != st.plans.end()) return *it->second;

  const Layout L(d);
  auto cp = std::make_unique<CachedPlan>();
  cp->quirks = quirks_for(cudnn_graph::runtime_version(), d.T, backward);
  const size_t max_plans = attention_tuning() == AttentionTuning::Off ? 1 : kTuneCandidates;
  try {
    cp->candidates = backward ? build_backward(st.handle, L, cp->quirks, max_plans)
                              : build_forward(st.handle, L, max_plans);
  } catch (const Error& e) {
    TETRA_FAIL(Device, e.what(), "; TETRA_ATTENTION=reference runs the reference kernels instead");
  }
  int64_t offset = 0;
  if (backward) {
    cp->dq_accum_offset = offset;
    cp->dq_accum_bytes = d.B * d.H * d.T * d.D * static_cast<int64_t>(sizeof(float));
    offset = align256(offset + cp->dq_accum_bytes);
    cp->softmax_sum_offset = offset;
    offset = align256(offset + d.B * d.H * d.T * static_cast<int64_t>(sizeof(float)));
  }
  cp->cudnn_offset = offset;
  int64_t cudnn_bytes = 0;
  for (const cudnn_graph::Plan& p : cp->candidates) cudnn_bytes = std::max(cudnn_bytes, p.workspace_bytes);
  cp->total_bytes = offset + cudnn_bytes;
  if (cp->quirks.padding_workaround) {
    // Every sequence is full length: seq_len_q = seq_len_kv = T for each batch row, as two int32 [B]
    // arrays, the second at a 16-byte aligned offset (seq_lens_kv_offset()).
    const size_t bytes = 2 * seq_lens_kv_offset(d.B);
    std::vector<int32_t> lens(bytes / sizeof(int32_t), static_cast<int32_t>(d.T));
    cp->seq_lens = allocate(bytes, dev);
    TETRA_CUDA_CHECK(cudaMemcpyAsync(cp->seq_lens, lens.data(), bytes, cudaMemcpyHostToDevice, stream));
    TETRA_CUDA_CHECK(cudaStreamSynchronize(stream));  // `lens` is pageable and about to go away
  }
  return *(st.plans[key] = std::move(cp));
}

// With st.mu held. The workspace of `stream`, at least `bytes` large (nullptr when 0).
void* workspace_for(DeviceState& st, Device dev, cudaStream_t stream, int64_t bytes) {
  if (bytes <= 0) return nullptr;
  Workspace& ws = st.workspaces[stream];
  if (ws.bytes < static_cast<size_t>(bytes)) {
    // Stream-ordered: earlier calls on this stream finish with the old buffer before it is reused.
    if (ws.ptr) release(ws.ptr, ws.bytes, dev);
    ws.ptr = allocate(static_cast<size_t>(bytes), dev);
    ws.bytes = static_cast<size_t>(bytes);
  }
  return ws.ptr;
}

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// With st.mu held. Runs the call through `launch(plan)`; on the first uncaptured call of a plan with
// several candidates (tuning on), first times each candidate on this call's tensors (every candidate
// writes the call's full outputs, and the chosen one runs last, so the call's result is the chosen
// plan's) and keeps the fastest.
template <class Launch>
void run_plan(CachedPlan& cp, cudaStream_t stream, const char* what, Launch&& launch) {
  if (!cp.tuned && cp.candidates.size() > 1) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    TETRA_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture == cudaStreamCaptureStatusNone) {
      cp.tuned = true;
      const size_t n = cp.candidates.size();
      const std::vector<float> best_ms =
          time_candidates(static_cast<int>(n), stream, kTuneTiming, [&](int i) {
            launch(cp.candidates[static_cast<size_t>(i)]);  // a failure throws
            return true;
          });
      const size_t best = static_cast<size_t>(std::max(pick_candidate(best_ms, kTuneSwitchMargin), 0));
      cp.best = static_cast<int>(best);
      if (attention_tuning() == AttentionTuning::Verbose) {
        std::fprintf(stderr, "tetra: %s tuned over %zu engine configs:", what, n);
        for (size_t i = 0; i < n; ++i)
          std::fprintf(stderr, "\n  %s %.4f ms%s", cp.candidates[i].how.c_str(), static_cast<double>(best_ms[i]),
                       i == best ? " (chosen)" : "");
        std::fprintf(stderr, "\n");
      }
    }
  }
  launch(cp.plan());
}

}  // namespace

AttentionTuning attention_tuning() { return g_tuning.get(); }

void set_attention_tuning(AttentionTuning mode) { g_tuning.set(mode); }

// ---------- support ----------

std::string cudnn_attention_unsupported(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads,
                                        std::initializer_list<const Tensor*> operands) {
  if (qkv.dtype() != DType::BF16) return detail::concat("it takes bf16 tensors, got ", dtype_name(qkv.dtype()));
  if (!qkv.device().is_cuda()) return "qkv is not on a CUDA device";
  if (qkv.ndim() != 3 || n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 ||
      qkv.dim(2) % (n_heads + 2 * n_kv_heads) != 0)
    return "qkv is not [B, T, (H + 2·Hkv)·D] with Hkv dividing H";
  const int64_t T = qkv.dim(1), D = qkv.dim(2) / (n_heads + 2 * n_kv_heads);
  const int64_t v = cudnn_graph::runtime_version();
  if (v < 90000) return "it needs cuDNN 9.0 or newer, found " + cudnn_graph::version_string(v);
  if (v == 91000 || v == 91001)
    return "cuDNN " + cudnn_graph::version_string(v) + " has known SDPA bugs (use 9.10.2 or newer)";
  int major = 0;
  TETRA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, qkv.device().index));
  if (major < 8) return detail::concat("it needs an sm_80 or newer GPU, found sm_", major, "x");
  const int64_t max_d = major == 9 ? 256 : 128;
  if (D % 8 != 0 || D > max_d)
    return detail::concat("head dim D = ", D, " must be a multiple of 8 and at most ", max_d, " on sm_", major, "x");
  if (T < 2) return detail::concat("sequence length T = ", T, " is below 2");
  if (!aligned16(qkv.data_ptr())) return "qkv is not 16-byte aligned";
  for (const Tensor* t : operands)
    if (t && t->defined() && !aligned16(t->data_ptr())) return t->describe() + " is not 16-byte aligned";
  return "";
}

// ---------- forward / backward ----------

void attention_forward_cudnn(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads) {
  const char* op = "attention_forward (cuDNN SDPA)";
  const AttentionDims d = check_attention_forward(op, out, lse, qkv, n_heads, n_kv_heads);
  if (d.B == 0 || d.T == 0) return;
  if (std::string why = cudnn_attention_unsupported(qkv, n_heads, n_kv_heads, {&out, &lse}); !why.empty())
    TETRA_FAIL(Device, op, ": cuDNN fused attention cannot run: ", why, " (", qkv.describe(),
               "); TETRA_ATTENTION=reference uses the reference kernels");
  const Device dev = qkv.device();
  const DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  DeviceState& st = device_state(dev);
  std::lock_guard<std::mutex> lock(st.mu);
  CachedPlan& cp = plan_for(st, dev, d, false, stream);
  char* ws = static_cast<char*>(workspace_for(st, dev, stream, cp.total_bytes));

  float attn_scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  float mask_value = cp.quirks.neg_inf;
  const int64_t k_off = d.k_offset() * static_cast<int64_t>(sizeof(uint16_t));  // bytes from q to k
  const int64_t v_off = d.v_offset() * static_cast<int64_t>(sizeof(uint16_t));  // bytes from q to v
  char* q = bytes_of(qkv);
  const std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kAttnScale, kNegInf};
  const std::vector<void*> ptrs{q, q + k_off, q + v_off, out.data_ptr(), lse.data_ptr(), &attn_scale, &mask_value};
  TETRA_CUDNN_CHECK(cudnnSetStream(st.handle, stream));
  run_plan(cp, stream, op, [&](const cudnn_graph::Plan& plan) {
    cudnn_graph::execute(st.handle, plan, uids, ptrs, ws ? ws + cp.cudnn_offset : nullptr, op);
  });
}

void attention_backward_cudnn(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              const Tensor& lse, int64_t n_heads, int64_t n_kv_heads) {
  const char* op = "attention_backward (cuDNN SDPA)";
  const AttentionDims d = check_attention_backward(op, dqkv, dout, qkv, out, lse, n_heads, n_kv_heads);
  if (d.B == 0 || d.T == 0) return;
  if (std::string why = cudnn_attention_unsupported(qkv, n_heads, n_kv_heads, {&dqkv, &dout, &out, &lse});
      !why.empty())
    TETRA_FAIL(Device, op, ": cuDNN fused attention cannot run: ", why, " (", qkv.describe(),
               "); TETRA_ATTENTION=reference uses the reference kernels");
  const Device dev = qkv.device();
  const DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  DeviceState& st = device_state(dev);
  std::lock_guard<std::mutex> lock(st.mu);
  CachedPlan& cp = plan_for(st, dev, d, true, stream);
  char* ws = static_cast<char*>(workspace_for(st, dev, stream, cp.total_bytes));

  float attn_scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  float mask_value = cp.quirks.neg_inf;
  float one = 1.0f;
  const int64_t k_off = d.k_offset() * static_cast<int64_t>(sizeof(uint16_t));
  const int64_t v_off = d.v_offset() * static_cast<int64_t>(sizeof(uint16_t));
  char* q = bytes_of(qkv);
  char* dq = bytes_of(dqkv);
  std::vector<int64_t> uids{kQ,  kK,  kV,         kO,      kDO,  kStats,      kDQ,     kDK,
                            kDV, kAttnScale, kNegInf, kOne, kSoftmaxSum, kDQAccum};
  std::vector<void*> ptrs{q,
                          q + k_off,
                          q + v_off,
                          out.data_ptr(),
                          dout.data_ptr(),
                          lse.data_ptr(),
                          dq,
                          dq + k_off,
                          dq + v_off,
                          &attn_scale,
                          &mask_value,
                          &one,
                          ws + cp.softmax_sum_offset,
                          ws + cp.dq_accum_offset};
  if (cp.quirks.padding_workaround) {
    uids.push_back(kSeqLenQ);
    ptrs.push_back(cp.seq_lens);
    uids.push_back(kSeqLenKV);
    ptrs.push_back(static_cast<char*>(cp.seq_lens) + seq_lens_kv_offset(d.B));
  }
  TETRA_CUDNN_CHECK(cudnnSetStream(st.handle, stream));
  run_plan(cp, stream, op, [&](const cudnn_graph::Plan& plan) {
    if (cp.quirks.memset_dq_accum)
      TETRA_CUDA_CHECK(cudaMemsetAsync(ws + cp.dq_accum_offset, 0, static_cast<size_t>(cp.dq_accum_bytes), stream));
    cudnn_graph::execute(st.handle, plan, uids, ptrs, ws + cp.cudnn_offset, op);
  });
}

std::string cudnn_attention_plan_info(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, bool backward) {
  if (std::string why = cudnn_attention_unsupported(qkv, n_heads, n_kv_heads, {}); !why.empty())
    return "unsupported: " + why;
  const AttentionDims d{qkv.dim(0), qkv.dim(1), n_heads, n_kv_heads, qkv.dim(2) / (n_heads + 2 * n_kv_heads)};
  const Device dev = qkv.device();
  const DeviceScope scope(dev);
  cudaStream_t stream = stream_of(dev);
  DeviceState& st = device_state(dev);
  std::lock_guard<std::mutex> lock(st.mu);
  const CachedPlan& cp = plan_for(st, dev, d, backward, stream);
  return detail::concat("cuDNN ", cudnn_graph::version_string(cudnn_graph::runtime_version()), ", ", cp.plan().how,
                        cp.candidates.size() > 1
                            ? detail::concat(cp.tuned ? ", tuned over " : ", not yet tuned over ", cp.candidates.size(),
                                             " configs")
                            : std::string(),
                        ", workspace ", cp.total_bytes, " bytes",
                        cp.quirks.padding_workaround ? ", padding-mask workaround" : "");
}

}  // namespace tetra::cuda
