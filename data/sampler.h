// Sampler: which windows of the token stream each rank trains on, at each step, deterministically.
//
// The token stream is cut into windows of seq_len + 1 tokens with stride seq_len: window w covers
// tokens [w·T, w·T + T + 1), so its inputs are [w·T, w·T + T) and its targets the same shifted by
// one; there are (size − 1) / T windows. Training consumes global sequence *slots* 0, 1, 2, ...:
// step s uses slots [s·B, (s+1)·B) (B = global_batch). Slot i belongs to epoch i / W (W = number
// of windows) and maps to window i mod W, or, with shuffle on, to perm_epoch(i mod W), where
// perm_epoch is a Fisher–Yates permutation drawn from Rng(seed XOR epoch) — so every epoch visits
// every window exactly once, in its own order. Within a step the B slots are split in order:
// DP rank r takes [r·B/dp, (r+1)·B/dp) and its micro-batch k the k-th run of micro_batch slots.
//
// Several datasets (shards of one dataset count as one: their windows are concatenated, shard by
// shard, and never straddle a shard boundary): slot i first goes through the BlendSchedule, which
// names the dataset d and the sample k of d it draws; sample k is window k mod W_d of epoch k / W_d
// of that dataset, permuted as above with the dataset's own seed (dataset 0: the run seed; dataset
// d > 0: seed XOR splitmix64(d)). A single dataset is the plain case above, bit for bit.
//
// Resuming: the sampler has no state beyond the configuration. The position to checkpoint is the
// step number alone: window_starts(step, micro) is a pure function of (config, dataset size, step,
// micro), identical on every rank and across restarts, and independent of dp_size as far as the
// global order goes (a resumed run may change dp and micro_batch, as long as global_batch stays).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/blend_schedule.h"

namespace tetra::data {

struct SamplerConfig {
  int64_t seq_len = 0;       // T: tokens per sequence (the window holds T + 1)
  int64_t global_batch = 0;  // B: sequences per optimizer step, over all data-parallel ranks
  int64_t micro_batch = 0;   // sequences per forward/backward pass on one rank
  int dp_rank = 0;           // this rank's index in the data-parallel group
  int dp_size = 1;           // data-parallel group size
  bool shuffle = false;      // permute windows per epoch (else: file order)
  uint64_t seed = 0;         // run seed; epoch e is shuffled with seed XOR e
};

// One row of a micro-batch: a window of one dataset of the blend.
struct SampleRef {
  int source = 0;      // dataset of the blend (0 when there is one)
  int64_t window = 0;  // window index within that dataset, in [0, W_source)
  bool operator==(const SampleRef&) const = default;
};

class Sampler {
 public:
  // Validates the configuration against a dataset of `dataset_tokens` tokens; throws a Config error
  // naming the inconsistent values (batch not divisible, dataset shorter than one window, ...).
  Sampler(const SamplerConfig& config, int64_t dataset_tokens);
  // A blend of datasets holding source_windows[d] windows each, drawn with `weights` (positive; one
  // per dataset, or empty for a single dataset).
  Sampler(const SamplerConfig& config, const std::vector<int64_t>& source_windows,
          const std::vector<double>& weights = {});

  const SamplerConfig& config() const { return config_; }
  int num_sources() const { return static_cast<int>(sources_.size()); }
  int64_t num_windows(int source = 0) const { return sources_[static_cast<size_t>(source)].windows; }  // W
  int accumulation_steps() const { return accumulation_; }  // B / (dp · micro_batch)
  int64_t local_batch() const { return config_.global_batch / config_.dp_size; }

  // The rows of micro-batch `micro` of `step` on this rank, in order, into out[0..micro_batch).
  void samples(int64_t step, int micro, SampleRef* out);
  // The dataset and window global slot `slot` draws.
  SampleRef sample_of_slot(int64_t slot);

  // Single dataset only (a blend fails these checks):
  // Token offsets of the micro_batch windows of micro-batch `micro` of `step` on this rank, in
  // row order. Each window spans seq_len + 1 tokens from its offset.
  std::vector<int64_t> window_starts(int64_t step, int micro);
  // Same, written into out[0..micro_batch) (no allocation).
  void window_starts(int64_t step, int micro, int64_t* out);

  // The global slot of row 0 of (step, micro) on this rank; rows follow consecutively.
  int64_t first_slot(int64_t step, int micro) const;
  // Window index of global slot `slot` (0 <= result < num_windows()).
  int64_t window_of_slot(int64_t slot);
  // Epoch that global slot `slot` falls in; (step·B) / W is the epoch count at a step's start.
  int64_t epoch_of_slot(int64_t slot) const;

 private:
  void check_config();
  int64_t window_in_source(int source, int64_t sample);

  SamplerConfig config_;
  int accumulation_ = 0;
  // Per dataset: its windows, its shuffle seed, and the permutations of the two most recently used
  // epochs (a step may straddle an epoch boundary). Stored as uint32 (4 bytes per window: 40 MB
  // for 10B tokens at T = 1024).
  struct CachedPerm {
    int64_t epoch = -1;
    std::vector<uint32_t> perm;
  };
  struct Source {
    int64_t windows = 0;
    uint64_t seed = 0;
    CachedPerm cache[2];
    int next_victim = 0;
  };
  std::vector<Source> sources_;
  std::vector<double> weights_;
  BlendSchedule blend_{{1.0}};
};

// The shuffle seed of dataset `source` of a blend under run seed `seed` (dataset 0: seed itself).
uint64_t source_seed(uint64_t seed, int source);

// The Fisher–Yates permutation of [0, n) that the sampler uses for `epoch` under `seed`.
std::vector<uint32_t> epoch_permutation(uint32_t n, uint64_t seed, int64_t epoch);

}  // namespace tetra::data
