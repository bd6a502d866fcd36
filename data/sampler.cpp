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

Sampler::Sampler(const SamplerConfig& config, int64_t dataset_tokens) : config_(config) {
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
  num_windows_ = dataset_tokens >= 1 ? (dataset_tokens - 1) / c.seq_len : 0;
  if (num_windows_ < 1)
    TETRA_FAIL(Config, "dataset shorter than one window: ", dataset_tokens, " tokens, but a sequence of length ",
               c.seq_len, " needs ", c.seq_len + 1, "; use more data or a shorter sequence length");
  if (c.shuffle && num_windows_ > int64_t{UINT32_MAX})
    TETRA_FAIL(Config, "dataset has ", num_windows_, " windows, more than the 2^32 - 1 that shuffling supports in one "
               "file; split it into several files");
}

int64_t Sampler::first_slot(int64_t step, int micro) const {
  TETRA_CHECK(step >= 0, "negative step ", step);
  TETRA_CHECK(micro >= 0 && micro < accumulation_, "micro-batch ", micro, " outside [0, ", accumulation_, ")");
  TETRA_CHECK(step <= (INT64_MAX - config_.global_batch) / config_.global_batch, "step ", step, " overflows the slot index");
  return step * config_.global_batch + config_.dp_rank * local_batch() + micro * config_.micro_batch;
}

const std::vector<uint32_t>& Sampler::permutation(int64_t epoch) {
  for (const CachedPerm& c : cache_)
    if (c.epoch == epoch) return c.perm;
  CachedPerm& slot = cache_[next_victim_];
  next_victim_ ^= 1;
  slot.perm = epoch_permutation(static_cast<uint32_t>(num_windows_), config_.seed, epoch);
  slot.epoch = epoch;
  return slot.perm;
}

int64_t Sampler::window_of_slot(int64_t slot) {
  TETRA_CHECK(slot >= 0, "negative slot ", slot);
  const int64_t index = slot % num_windows_;
  if (!config_.shuffle) return index;
  return permutation(slot / num_windows_)[static_cast<size_t>(index)];  // uint32 widened
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
