#include "runtime/cuda/candidate_timing.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/cuda/cuda_check.h"

namespace tetra::cuda {

namespace {

// CUDA events owned for the scope (destroyed also when a launch throws).
class Events {
 public:
  explicit Events(size_t n) : ev_(n, nullptr) {
    for (auto& e : ev_) TETRA_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Events() {
    for (auto e : ev_)
      if (e) (void)cudaEventDestroy(e);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  cudaEvent_t operator[](size_t i) const { return ev_[i]; }

 private:
  std::vector<cudaEvent_t> ev_;
};

}  // namespace

std::vector<float> time_candidates(int count, cudaStream_t stream, const CandidateTiming& timing,
                                   const std::function<bool(int)>& launch) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> best_ms(static_cast<size_t>(std::max(count, 0)), inf);
  std::vector<char> ok(best_ms.size(), 1);
  for (int i = 0; i < count; ++i)
    for (int r = 0; r < timing.warmups && ok[i]; ++r)
      if (!launch(i)) ok[i] = 0;
  const auto first_ok = std::find(ok.begin(), ok.end(), 1);
  if (first_ok == ok.end()) {
    TETRA_CUDA_CHECK(cudaStreamSynchronize(stream));
    return best_ms;
  }

  Events ev(2 * best_ms.size());
  TETRA_CUDA_CHECK(cudaEventRecord(ev[0], stream));
  (void)launch(static_cast<int>(first_ok - ok.begin()));
  TETRA_CUDA_CHECK(cudaEventRecord(ev[1], stream));
  TETRA_CUDA_CHECK(cudaEventSynchronize(ev[1]));
  float once = 0.0f;
  TETRA_CUDA_CHECK(cudaEventElapsedTime(&once, ev[0], ev[1]));
  const int reps = std::clamp(static_cast<int>(timing.round_target_ms / std::max(once, 1e-3f)), 1, timing.max_reps);

  for (int round = 0; round < timing.rounds; ++round) {
    for (int i = 0; i < count; ++i) {
      if (!ok[i]) continue;
      TETRA_CUDA_CHECK(cudaEventRecord(ev[2 * i], stream));
      for (int r = 0; r < reps && ok[i]; ++r)
        if (!launch(i)) ok[i] = 0;
      TETRA_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
    }
    TETRA_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < count; ++i) {
      if (!ok[i]) continue;
      float ms = 0.0f;
      TETRA_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
      best_ms[i] = std::min(best_ms[i], ms / static_cast<float>(reps));
    }
  }
  for (int i = 0; i < count; ++i)
    if (!ok[i]) best_ms[i] = inf;
  return best_ms;
}

int pick_candidate(const std::vector<float>& ms, float switch_margin) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(ms.size()); ++i)
    if (std::isfinite(ms[i]) && (best < 0 || ms[i] < ms[best])) best = i;
  if (best > 0 && std::isfinite(ms[0]) && ms[best] > switch_margin * ms[0]) best = 0;
  return best;
}

}  // namespace tetra::cuda
