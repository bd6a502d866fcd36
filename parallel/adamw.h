// AdamW with PyTorch's semantics (torch.optim.AdamW): decoupled weight decay p -= lr·wd·p on
// parameters marked weight_decay (tensors of 2+ dims), none on biases and norm weights; bias
// corrections 1 − βᵗ. State is laid out like the ParamSet's flat buffer: the master fp32, the
// moments exp_avg and exp_avg_sq of AdamWConfig::state_dtype (fp32, or bf16 as DeepSeek-V3 keeps
// them: 2 + 2 instead of 4 + 4 bytes per parameter; the update computes in fp32). Where the
// working weights are not fp32 (bf16 on CUDA) the optimizer keeps fp32 master weights, which start
// from the ParamSet's fp32 initial values (ParamSet::set_initial_values) where it holds them, and
// writes the rounded result back to the working copy in the same pass.
#pragma once
#include "parallel/fp8_update_amax.h"
#include "parallel/param_set.h"
#include "runtime/communicator.h"
#include "runtime/ops.h"

namespace tetra {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  // exp_avg and exp_avg_sq: fp32 or bf16 (optimizer.state_dtype). bf16 keeps v = E[g²]'s range
  // (8 exponent bits, as fp32) but 8 significant bits: each step's new moments are rounded once.
  DType state_dtype = DType::F32;
  // The op's hyper-parameters for update number `step` (1-based); weight decay is per segment.
  ops::AdamWHyper hyper(float lr, int64_t step, float grad_scale) const {
    return {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .step = step, .grad_scale = grad_scale};
  }
};

class AdamW {
 public:
  AdamW(ParamSet& params, const AdamWConfig& cfg);
  // One update with learning rate `lr`; gradients are multiplied by grad_scale first (clipping).
  void step(float lr, float grad_scale);
  // The update as the device control decides it (runtime/step_control.h); steps_taken() is not
  // advanced here (the count is the control's).
  void step(const Tensor& control);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }

  // Flat state, same layout as ParamSet::flat_values(): master fp32 (the value buffer itself when
  // the working weights are fp32), the moments of cfg.state_dtype.
  Tensor& master() { return master_; }
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  bool has_separate_master() const { return separate_master_; }
  const AdamWConfig& config() const { return cfg_; }
  // The weights were written other than by an update (a checkpoint loaded): the experts' amaxes of
  // the last update are not theirs (parallel/fp8_update_amax.h).
  void weights_replaced() { amaxes_.stale(); }

 private:
  void update(const ops::AdamWHyper& h, const Tensor* control);
  ParamSet& params_;
  AdamWConfig cfg_;
  Tensor master_, m_, v_;
  bool separate_master_ = false;
  int64_t step_ = 0;
  Fp8UpdateAmaxes amaxes_;  // every parameter's update covers its whole value
};

}  // namespace tetra
