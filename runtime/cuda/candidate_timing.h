// Timing of interchangeable implementations of one call (cuBLASLt algorithms, cuDNN engine configs)
// for the autotuners that pick among them at the first call of a problem.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <functional>
#include <vector>

namespace tetra::cuda {

struct CandidateTiming {
  int warmups = 1;               // launches of each candidate before timing (loads its kernels)
  int rounds = 3;                // interleaved rounds over all candidates; a candidate's time is its best
  float round_target_ms = 0.5f;  // device time one candidate's round aims at (its launches repeated)
  int max_reps = 50;             // at most this many launches per candidate and round
};

// Times `count` candidates on `stream`: launch(i) enqueues candidate i once and returns false if it
// failed, which rules it out. Interleaving the rounds spreads clock drift over all candidates; the
// launches per round come from one timed launch of the first candidate that works. Returns each
// candidate's best round per launch, in ms (infinity for one that failed). Synchronises the stream,
// so never call it while the stream is being captured into a CUDA graph.
std::vector<float> time_candidates(int count, cudaStream_t stream, const CandidateTiming& timing,
                                   const std::function<bool(int)>& launch);

// The candidate to keep: the fastest, except that candidate 0 (the library's own first choice) stays
// unless the fastest takes at most `switch_margin` of its time. -1 when none worked.
int pick_candidate(const std::vector<float>& ms, float switch_margin);

// An autotuner's mode (an enum whose values are ≥ 0): read from the environment by `from_env` at the
// first use (a bad value throws at every use until a mode is set), overridable for the process.
template <class Mode>
class TuningMode {
 public:
  explicit constexpr TuningMode(Mode (*from_env)()) : from_env_(from_env) {}
  Mode get() {
    int m = mode_.load(std::memory_order_relaxed);
    if (m == kUnset) {
      const Mode from_env = from_env_();
      int expected = kUnset;
      mode_.compare_exchange_strong(expected, static_cast<int>(from_env));
      m = mode_.load(std::memory_order_relaxed);
    }
    return static_cast<Mode>(m);
  }
  void set(Mode mode) { mode_.store(static_cast<int>(mode), std::memory_order_relaxed); }

 private:
  static constexpr int kUnset = -1;
  Mode (*from_env_)();
  std::atomic<int> mode_{kUnset};
};

}  // namespace tetra::cuda
