#include "models/llama_config.h"

#include "models/model_family.h"
#include "models/rope_scaling.h"

namespace tetra {

namespace {
std::string str(int64_t v) { return std::to_string(v); }
std::string divisors(int64_t n) {
  std::string out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out += (out.empty() ? "" : ", ") + str(d);
  return out;
}
}  // namespace

int64_t LlamaConfig::default_ffn_dim(int64_t d_model) {
  const int64_t hidden = 2 * 4 * d_model / 3;
  return (hidden + 255) / 256 * 256;
}

int64_t LlamaConfig::attention_params() const {
  const int64_t C = d_model, D = head_dim();
  return C /*input norm*/ + qkv_rows() * C + (qkv_bias ? qkv_rows() : 0) + (qk_norm ? 2 * D : 0) +
         C * n_heads * D /*o_proj*/;
}

int64_t LlamaConfig::block_params() const {
  return attention_params() + d_model /*post norm*/ + 3 * d_model * ffn() /*gate, up, down*/;
}

int64_t LlamaConfig::moe_block_params() const {
  const int64_t C = d_model, E = moe.n_experts;
  return attention_params() + C + E * C /*gate*/ + E * 3 * C * expert_ffn() + 3 * C * shared_ffn();
}

int64_t LlamaConfig::moe_block_active_params() const {
  const int64_t C = d_model, E = moe.n_experts;
  return attention_params() + C + E * C + moe.top_k * 3 * C * expert_ffn() + 3 * C * shared_ffn();
}

int64_t LlamaConfig::num_params() const {
  const int64_t dense = n_layers - moe_blocks();
  return vocab_size * d_model * (tie_embeddings ? 1 : 2) + dense * block_params() + moe_blocks() * moe_block_params() +
         d_model;
}

int64_t LlamaConfig::active_params() const {
  return num_params() - moe_blocks() * (moe_block_params() - moe_block_active_params());
}

double LlamaConfig::flops_per_token(int64_t seq_len) const {
  const int64_t blocks = (n_layers - moe_blocks()) * block_params() + moe_blocks() * moe_block_active_params();
  const double non_embedding = static_cast<double>(blocks + d_model + vocab_size * d_model);
  return 6.0 * non_embedding +
         12.0 * static_cast<double>(n_layers) * static_cast<double>(d_model) * static_cast<double>(seq_len);
}

void LlamaConfig::validate(int tp) const {
  validate_common_shape(args(), tp);
  if (tp < 1) tp = 1;
  const int64_t kv = kv_heads();
  if (kv < 1 || n_heads % kv != 0)
    throw ModelArgsError({"model.n_kv_heads", "model.n_heads"},
                         str(kv) + " key/value heads do not divide model.n_heads = " + str(n_heads) +
                             " (each serves n_heads / n_kv_heads query heads); use one of " + divisors(n_heads) +
                             " (or 0 for n_heads)");
  // tp dividing the key/value heads splits them; a multiple of them (dividing n_heads, checked
  // above) replicates each over tp / n_kv_heads ranks, which then hold its query heads.
  if (kv % tp != 0 && tp % kv != 0) {
    std::string valid_tp, valid_kv;
    for (int64_t t = 1; t <= n_heads; ++t) {
      if (n_heads % t != 0) continue;
      if (kv % t == 0 || t % kv == 0) valid_tp += (valid_tp.empty() ? "" : ", ") + str(t);
      if (t % tp == 0 || tp % t == 0) valid_kv += (valid_kv.empty() ? "" : ", ") + str(t);
    }
    throw ModelArgsError({"model.n_kv_heads", "parallel.tp"},
                         str(kv) + " key/value heads and parallel.tp = " + str(tp) +
                             " ranks: tp must divide the key/value heads (each rank holds whole heads) or be a "
                             "multiple of them (each head replicated over tp / n_kv_heads ranks); use tp among " +
                             valid_tp + ", or n_kv_heads among " + valid_kv);
  }
  if (explicit_head_dim < 0 || (explicit_head_dim > 0 && explicit_head_dim % 2 != 0))
    throw ModelArgsError({"model.head_dim"}, str(explicit_head_dim) + " channels per head; use a positive even number "
                         "(the rotary embedding turns pairs of channels), or 0 for d_model / n_heads");
  if (head_dim() % 2 != 0)
    throw ModelArgsError({"model.d_model", "model.n_heads"},
                         str(d_model) + " / model.n_heads = " + str(head_dim()) +
                             " channels per head, an odd number; the rotary embedding turns pairs of channels, so "
                             "use an even head dim, e.g. d_model " + str((head_dim() + 1) * n_heads));
  if (ffn() % tp != 0)
    throw ModelArgsError({"model.ffn_dim", "parallel.tp"},
                         str(ffn()) + " does not split over parallel.tp = " + str(tp) + " ranks; use a multiple of " +
                             str(tp));
  if (sliding_window < 0)
    throw ModelArgsError({"model.sliding_window"}, str(sliding_window) + "; use 0 (no window) or a window of at least "
                         "model.seq_len = " + str(max_seq_len));
  if (sliding_window > 0 && sliding_window < max_seq_len)
    throw ModelArgsError({"model.sliding_window", "model.seq_len"},
                         str(sliding_window) + " positions is shorter than the context model.seq_len = " +
                             str(max_seq_len) + ": sliding-window (band) attention does not run in tetra yet, and "
                             "full attention would be a different model; train with model.seq_len at most " +
                             str(sliding_window) + " (attention then never reaches past the window)");
  validate_rope_scaling(rope_scaling);
  if (moe.enabled()) validate_moe();
  std::vector<std::pair<std::string, int64_t>> widths = {
      {"model.d_model", d_model}, {"model.ffn_dim", ffn()}, {"model.n_heads", n_heads * head_dim()},
      {"model.n_kv_heads", qkv_rows()}};
  if (moe.enabled()) widths.push_back({"model.moe.ffn_dim", expert_ffn()});
  if (moe.enabled() && moe.n_shared > 0) widths.push_back({"model.moe.n_shared", moe.n_shared * expert_ffn()});
  validate_fp8_widths(args(), widths);
}

Rope LlamaConfig::rope() const { return Rope(rope_theta, rope_scaling_of(rope_scaling)); }

void LlamaConfig::validate_moe() const {
  const int64_t E = moe.n_experts, k = moe.top_k, G = moe.n_group, TG = moe.topk_group;
  if (k < 1 || k > E)
    throw ModelArgsError({"model.moe.top_k", "model.moe.n_experts"},
                         str(k) + " experts per token, but model.moe.n_experts = " + str(E) + "; use 1.." + str(E));
  if (G < 1 || E % G != 0)
    throw ModelArgsError({"model.moe.n_group", "model.moe.n_experts"},
                         str(G) + " expert groups do not divide model.moe.n_experts = " + str(E) + "; use one of " +
                             divisors(E) + " (1 = no group-limited routing)");
  if (TG < 1 || TG > G)
    throw ModelArgsError({"model.moe.topk_group", "model.moe.n_group"},
                         str(TG) + " groups per token, but model.moe.n_group = " + str(G) + "; use 1.." + str(G));
  if (G > 1 && E / G < 2)
    throw ModelArgsError({"model.moe.n_group", "model.moe.n_experts"},
                         str(G) + " groups of " + str(E / G) + " expert; a group scores the sum of its two best "
                         "experts, so use groups of at least 2 (n_group at most " + str(E / 2) + ")");
  if (G > 1 && TG * (E / G) < k)
    throw ModelArgsError({"model.moe.top_k", "model.moe.topk_group", "model.moe.n_group"},
                         str(k) + " experts per token, but model.moe.topk_group = " + str(TG) + " groups of " +
                             str(E / G) + " experts hold only " + str(TG * (E / G)) + "; raise topk_group to at least " +
                             str((k + E / G - 1) / (E / G)) + " or lower top_k");
  if (moe.first_k_dense < 0 || moe.first_k_dense >= n_layers)
    throw ModelArgsError({"model.moe.first_k_dense", "model.n_layers"},
                         str(moe.first_k_dense) + " leading dense layers leave no MoE layer among model.n_layers = " +
                             str(n_layers) + "; use 0.." + str(n_layers - 1) + " (or model.moe.n_experts 0 for a "
                             "dense model)");
  if (moe.n_shared < 0)
    throw ModelArgsError({"model.moe.n_shared"}, str(moe.n_shared) + " shared experts; use 0 or more");
  if (moe.ffn_dim < 0)
    throw ModelArgsError({"model.moe.ffn_dim"}, str(moe.ffn_dim) + "; use a positive width, or 0 for model.ffn_dim");
  if (!(moe.route_scale > 0))
    throw ModelArgsError({"model.moe.route_scale"}, "must be positive (1 = the normalised weights as they are)");
  if (moe.bias_update_rate < 0 || moe.aux_loss_coef < 0)
    throw ModelArgsError({moe.bias_update_rate < 0 ? "model.moe.bias_update_rate" : "model.moe.aux_loss_coef"},
                         "must be 0 (off) or positive");
}

LlamaConfig LlamaConfig::from(const ModelArgs& a) {
  return {.arch = a.arch, .vocab_size = a.vocab_size, .max_seq_len = a.seq_len, .d_model = a.d_model, .n_layers = a.n_layers,
          .n_heads = a.n_heads, .n_kv_heads = a.n_kv_heads, .explicit_head_dim = a.head_dim, .ffn_dim = a.ffn_dim,
          .norm_eps = static_cast<float>(a.norm_eps), .rope_theta = static_cast<float>(a.rope_theta),
          .rope_scaling = a.rope_scaling, .tie_embeddings = a.tie_embeddings, .qkv_bias = a.arch == "qwen2",
          .qk_norm = a.arch == "qwen3", .sliding_window = a.sliding_window,
          .moe = a.moe, .recompute = a.recompute, .fp8 = a.fp8};
}

ModelArgs LlamaConfig::args() const {
  return {.arch = arch, .vocab_size = vocab_size, .seq_len = max_seq_len, .d_model = d_model, .n_layers = n_layers,
          .n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = explicit_head_dim, .ffn_dim = ffn_dim,
          .norm_eps = norm_eps, .rope_theta = rope_theta, .tie_embeddings = tie_embeddings,
          .rope_scaling = rope_scaling, .sliding_window = sliding_window, .moe = moe, .recompute = recompute, .fp8 = fp8};
}

}  // namespace tetra
