#include "models/llama_config.h"

#include "models/model_family.h"

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

int64_t LlamaConfig::block_params() const {
  const int64_t C = d_model, D = head_dim(), F = ffn();
  return 2 * C /*norms*/ + qkv_rows() * C + C * n_heads * D /*o_proj*/ + 3 * C * F /*gate, up, down*/;
}

int64_t LlamaConfig::num_params() const {
  return vocab_size * d_model * (tie_embeddings ? 1 : 2) + n_layers * block_params() + d_model;
}

double LlamaConfig::flops_per_token(int64_t seq_len) const {
  const double non_embedding = static_cast<double>(n_layers * block_params() + d_model + vocab_size * d_model);
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
  if (kv % tp != 0)
    throw ModelArgsError({"model.n_kv_heads", "parallel.tp"},
                         str(kv) + " key/value heads do not split over parallel.tp = " + str(tp) +
                             " ranks (each rank holds whole heads); use tp among " + divisors(kv) + ", or more kv heads");
  if (head_dim() % 2 != 0)
    throw ModelArgsError({"model.d_model", "model.n_heads"},
                         str(d_model) + " / model.n_heads = " + str(head_dim()) +
                             " channels per head, an odd number; the rotary embedding turns pairs of channels, so "
                             "use an even head dim, e.g. d_model " + str((head_dim() + 1) * n_heads));
  if (ffn() % tp != 0)
    throw ModelArgsError({"model.ffn_dim", "parallel.tp"},
                         str(ffn()) + " does not split over parallel.tp = " + str(tp) + " ranks; use a multiple of " +
                             str(tp));
}

LlamaConfig LlamaConfig::from(const ModelArgs& a) {
  LlamaConfig c;
  c.vocab_size = a.vocab_size;
  c.max_seq_len = a.seq_len;
  c.d_model = a.d_model;
  c.n_layers = a.n_layers;
  c.n_heads = a.n_heads;
  c.n_kv_heads = a.n_kv_heads;
  c.ffn_dim = a.ffn_dim;
  c.norm_eps = static_cast<float>(a.norm_eps);
  c.rope_theta = static_cast<float>(a.rope_theta);
  c.tie_embeddings = a.tie_embeddings;
  c.recompute = a.recompute;
  return c;
}

ModelArgs LlamaConfig::args() const {
  ModelArgs a;
  a.arch = "llama";
  a.vocab_size = vocab_size;
  a.seq_len = max_seq_len;
  a.d_model = d_model;
  a.n_layers = n_layers;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.ffn_dim = ffn_dim;
  a.norm_eps = norm_eps;
  a.rope_theta = rope_theta;
  a.tie_embeddings = tie_embeddings;
  a.recompute = recompute;
  return a;
}

}  // namespace tetra
