// The scalar pieces of the DeepSeek-V3 router (runtime/ops.h, moe_router_forward/backward) that the
// CPU twin and the CUDA kernels share, so that both score, order and weight experts alike: the
// sigmoid (evaluated in fp64, rounded to fp32: the backends' scores agree bit for bit but in
// vanishingly rare cases), the order of choice (score descending, ties to the lower index), the
// weight normalisation in slot order, and the balancing bias step.
#pragma once
#include <cmath>
#include <cstdint>

#include "runtime/adamw_scalars.h"  // TETRA_HOST_DEVICE

namespace tetra {

TETRA_HOST_DEVICE inline float moe_sigmoid(float logit) {
  return static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(logit))));
}

// Whether candidate a (score ca) is chosen before candidate b (score cb): a higher score, or an equal
// score and a lower index. Experts and groups are ordered alike.
TETRA_HOST_DEVICE inline bool moe_chosen_before(float ca, int32_t a, float cb, int32_t b) {
  return ca > cb || (ca == cb && a < b);
}

// Hugging Face's normalisation: w_j = (s_j / (Σ_j s_j + 1e-20)) · route_scale, the sum in slot
// order j = 0 … k−1, all in fp32.
TETRA_HOST_DEVICE inline float moe_weight_denominator(const float* s, int64_t k) {
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) sum += s[j];
  return sum + 1e-20f;
}
TETRA_HOST_DEVICE inline float moe_weight(float s, float denominator, float route_scale) {
  return s / denominator * route_scale;
}

// The balancing bias step for an expert that received `load` of a step's slots, mean = the mean load:
// rate · sign(mean − load), sign(0) = 0.
TETRA_HOST_DEVICE inline float moe_bias_step(int32_t load, double mean, float rate) {
  const double gap = mean - static_cast<double>(load);
  return gap > 0.0 ? rate : (gap < 0.0 ? -rate : 0.0f);
}

}  // namespace tetra
