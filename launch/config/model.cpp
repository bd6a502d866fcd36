#include "launch/config/model.h"

namespace tetra::launch {

ModelArgs model_args(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  ModelArgs a;
  a.arch = m.arch;
  a.vocab_size = m.vocab_size;
  a.seq_len = m.seq_len;
  a.d_model = m.d_model;
  a.n_layers = m.n_layers;
  a.n_heads = m.n_heads;
  a.ln_eps = m.ln_eps;
  a.n_kv_heads = m.n_kv_heads;
  a.ffn_dim = m.ffn_dim;
  a.norm_eps = m.norm_eps;
  a.rope_theta = m.rope_theta;
  a.tie_embeddings = m.tie_embeddings;
  a.moe = m.moe;
  a.recompute = cfg.train.recompute;
  return a;
}

const ModelFamily& model_family_of(const Config& cfg) { return model_family(cfg.model.arch); }

DType activation_dtype(const Config& cfg) {
  return cfg.train.precision == DtypeChoice::BF16 ? DType::BF16 : DType::F32;
}

DType residual_dtype(const Config& cfg) {
  return cfg.train.residual_dtype == ResidualDtype::FP32 ? DType::F32 : activation_dtype(cfg);
}

ActivationShape activation_shape(const Config& cfg) {
  ActivationShape s;
  s.micro_batch = cfg.train.micro_batch;
  s.seq_len = cfg.train.seq_len;
  s.value_bytes = static_cast<int64_t>(dtype_size(activation_dtype(cfg)));
  s.residual_bytes = static_cast<int64_t>(dtype_size(residual_dtype(cfg)));
  s.tp = cfg.parallel.tp;
  s.sequence_parallel = cfg.parallel.tp > 1 && cfg.parallel.sequence_parallel;
  return s;
}

}  // namespace tetra::launch
