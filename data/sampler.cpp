#include "data/sampler.h"

#include <utility>

#include "runtime/error.h"
#include "runtime/random.h"

namespace tetra::data {

std::vector<uint32_t> epoch_permutation(uint32_t n, uint64_t seed, int64_t epoch) {
  std::vector<uint32_t> perm(n);
  for (uint32_t i = 0; i < n; ++i) perm[i] = i;
  Rng rng(seed ^ static_cast<uint64_t>(epoch));
  // Fisher–Yates, from the back: position i takes a uniform pick among the first i + 1.
  for (uint64_t i = n; i-- > 1;) {
    uint64_t j = rng.below(i + 1);
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

uint64_t source_seed(uint64_t seed, int source) {
  if (source == 0) return seed;
  uint64_t z = static_cast<uint64_t>(source) * 0x9e3779b97f4a7c15ull;  // splitmix64's finaliser of d
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return seed ^ (z ^ (z >> 31));
}

void Sampler::check_config() {
  const SamplerConfig& c = config_;
  if (c.seq_len <= 0) TETRA_FAIL(Config, "sequence length must be positive, got ", c.seq_len);
  if (c.global_batch <= 0) TETRA_FAIL(Config, "global batch must be positive, got ", c.global_batch);
  if (c.micro_batch <= 0) TETRA_FAIL(Config, "micro-batch must be positive, got ", c.micro_batch);
  if (c.dp_size <= 0) TETRA_FAIL(Config, "data-parallel size must be positive, got ", c.dp_size);
  if (c.dp_rank < 0 || c.dp_rank >= c.dp_size)
    TETRA_FAIL(Config, "data-parallel rank ", c.dp_rank, " is outside [0, ", c.dp_size, ")");
  const int64_t per_pass = c.dp_size * c.micro_batch;
  if (c.global_batch % per_pass != 0)
    TETRA_FAIL(Config, "global batch ", c.global_batch, " is not divisible by dp (", c.dp_size, ") x micro-batch (",
               c.micro_batch, ") = ", per_pass, "; choose a global batch that is a multiple of ", per_pass,
               " (e.g. ", (c.global_batch / per_pass + 1) * per_pass, ")");
  accumulation_ = static_cast<int>(c.global_batch / per_pass);
}

Sampler::Sampler(const SamplerConfig& config, int64_t dataset_tokens) : config_(config) {
  check_config();
  const int64_t windows = dataset_tokens >= 1 ? (dataset_tokens - 1) / config_.seq_len : 0;
  if (windows < 1)
    TETRA_FAIL(Config, "dataset shorter than one window: ", dataset_tokens, " tokens, but a sequence of length ",
               config_.seq_len, " needs ", config_.seq_len + 1, "; use more data or a shorter sequence length");
  if (config_.shuffle && windows > int64_t{UINT32_MAX})
    TETRA_FAIL(Config, "dataset has ", windows, " windows, more than the 2^32 - 1 that shuffling supports in one "
               "file; split it into several files");
  sources_.resize(1);
  sources_[0].windows = windows;
  sources_[0].seed = config_.seed;
}

Sampler::Sampler(const SamplerConfig& config, const std::vector<int64_t>& source_windows,
                 const std::vector<double>& weights)
    : config_(config) {
  check_config();
  TETRA_CHECK(!source_windows.empty(), "a sampler needs at least one dataset");
  TETRA_CHECK(weights.empty() ? source_windows.size() == 1 : weights.size() == source_windows.size(),
              source_windows.size(), " datasets but ", weights.size(), " weights");
  sources_.resize(source_windows.size());
  for (size_t d = 0; d < source_windows.size(); ++d) {
    const int64_t w = source_windows[d];
    if (w < 1)
      TETRA_FAIL(Config, "dataset ", d + 1, " of the blend holds no window of ", config_.seq_len + 1,
                 " tokens; use more data or a shorter sequence length");
    if (config_.shuffle && w > int64_t{UINT32_MAX})
      TETRA_FAIL(Config, "dataset ", d + 1, " has ", w, " windows, more than the 2^32 - 1 that shuffling supports; "
                 "split it into a blend of smaller datasets");
    sources_[d].windows = w;
    sources_[d].seed = source_seed(config_.seed, static_cast<int>(d));
  }
  if (!weights.empty()) {
    weights_ = weights;
    blend_ = BlendSchedule(weights);
  }
}

int64_t Sampler::first_slot(int64_t step, int micro) const {
  TETRA_CHECK(step >= 0, "negative step ", step);
  TETRA_CHECK(micro >= 0 && micro < accumulation_, "micro-batch ", micro, " outside [0, ", accumulation_, ")");
  TETRA_CHECK(step <= (INT64_MAX - config_.global_batch) / config_.global_batch, "step ", step, " overflows the slot index");
  return step * config_.global_batch + config_.dp_rank * local_batch() + micro * config_.micro_batch;
}

int64_t Sampler::window_in_source(int source, int64_t sample) {
  Source& src = sources_[static_cast<size_t>(source)];
  const int64_t index = sample % src.windows;
  if (!config_.shuffle) return index;
  const int64_t epoch = sample / src.windows;
  for (const CachedPerm& c : src.cache)
    if (c.epoch == epoch) return c.perm[static_cast<size_t>(index)];
  CachedPerm& slot = src.cache[src.next_victim];
  src.next_victim ^= 1;
  slot.perm = epoch_permutation(static_cast<uint32_t>(src.windows), src.seed, epoch);
  slot.epoch = epoch;
  return slot.perm[static_cast<size_t>(index)];  // uint32 widened
}

SampleRef Sampler::sample_of_slot(int64_t slot) {
  TETRA_CHECK(slot >= 0, "negative slot ", slot);
  const BlendSlot b = blend_.at(slot);
  return {b.source, window_in_source(b.source, b.index)};
}

void Sampler::samples(int64_t step, int micro, SampleRef* out) {
  const int64_t first = first_slot(step, micro);
  for (int64_t j = 0; j < config_.micro_batch; ++j) out[j] = sample_of_slot(first + j);
}

int64_t Sampler::window_of_slot(int64_t slot) {
  TETRA_CHECK(sources_.size() == 1, "window_of_slot on a blend of ", sources_.size(), " datasets; use sample_of_slot");
  TETRA_CHECK(slot >= 0, "negative slot ", slot);
  return window_in_source(0, slot);
}

int64_t Sampler::epoch_of_slot(int64_t slot) const {
  TETRA_CHECK(sources_.size() == 1, "epoch_of_slot on a blend (each dataset has its own epochs)");
  return slot / sources_[0].windows;
}

void Sampler::window_starts(int64_t step, int micro, int64_t* out) {
  const int64_t first = first_slot(step, micro);
  for (int64_t j = 0; j < config_.micro_batch; ++j) out[j] = window_of_slot(first + j) * config_.seq_len;
}

std::vector<int64_t> Sampler::window_starts(int64_t step, int micro) {
  std::vector<int64_t> starts(static_cast<size_t>(config_.micro_batch));
  window_starts(step, micro, starts.data());
  return starts;
}

}  // namespace tetra::data
