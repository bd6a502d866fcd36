// What the norm kernels of runtime/cuda/norm.cu share: which normalisation an instantiation computes
// (LayerNorm, or RMSNorm: no mean, no bias) and the backward's fold of dx's amax. Part of norm.cu's
// translation unit, like the kernel headers that include it: the anonymous namespace keeps the
// kernels' names private to it.
#pragma once

#include <type_traits>

#include "runtime/cuda/kernel_common.cuh"

namespace tetra::cuda {
namespace {

enum class Norm { Layer, Rms };

// Raises m to the largest |value| of out[0 … V−1] as the GEMMs of the projection below read dx:
// dx_rounded's (TA) where it is written, else dx's (TX).
template <int V, class TA, class TX>
__device__ __forceinline__ void fold_dx_amax(unsigned& m, const float (&out)[V], bool rounded) {
  if constexpr (!std::is_same_v<TA, TX>) {
    if (rounded) {
#pragma unroll
      for (int k = 0; k < V; ++k) m = max(m, stored_abs_bits<TA>(out[k]));
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) m = max(m, stored_abs_bits<TX>(out[k]));
}

}  // namespace
}  // namespace tetra::cuda
