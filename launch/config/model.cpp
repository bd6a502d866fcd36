#include "launch/config/model.h"

#include <algorithm>

namespace tetra::launch {

ModelArgs model_args(const Config& cfg) {
  ModelArgs a = cfg.model;
  a.recompute = cfg.train.recompute;
  a.fp8 = cfg.train.fp8.recipe;
  return a;
}

const ModelFamily& model_family_of(const Config& cfg) { return model_family(cfg.model.arch); }

DType activation_dtype(const Config& cfg) {
  return cfg.train.precision == DtypeChoice::BF16 ? DType::BF16 : DType::F32;
}

DType residual_dtype(const Config& cfg) {
  return cfg.train.residual_dtype == ResidualDtype::FP32 ? DType::F32 : activation_dtype(cfg);
}

DType optimizer_state_dtype(const Config& cfg) {
  return cfg.optimizer.state_dtype == StateDtype::BF16 ? DType::BF16 : DType::F32;
}

ActivationShape activation_shape(const Config& cfg) {
  ActivationShape s;
  s.micro_batch = cfg.train.micro_batch;
  s.seq_len = cfg.train.seq_len;
  s.value_bytes = static_cast<int64_t>(dtype_size(activation_dtype(cfg)));
  s.residual_bytes = static_cast<int64_t>(dtype_size(residual_dtype(cfg)));
  s.tp = cfg.parallel.tp;
  s.sequence_parallel = cfg.parallel.tp > 1 && cfg.parallel.sequence_parallel;
  s.ep = std::max(1, cfg.parallel.ep);
  return s;
}

}  // namespace tetra::launch
