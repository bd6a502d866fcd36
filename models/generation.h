// Generation: the continuation of a prompt, one token at a time, with a key/value cache
// (models/kv_cache.h). The model's own layers run it: the embedding from MicroBatchContext::position,
// each block's attention against its cache, and the output layer's logits (targets undefined). The
// prompt goes through in one pass, then every new token in a pass of its own. Batch 1, one device,
// no tensor or pipeline parallelism; the parameters are those of the model (any dtype, any device).
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "models/model.h"

namespace tetra {

// How the next token is chosen from the logits of the last position.
struct Sampling {
  bool greedy = true;        // argmax; the fields below are for sampling only
  double temperature = 1.0;  // logits / temperature (> 0)
  int64_t top_k = 0;         // keep the k most likely tokens (0 = all)
  double top_p = 1.0;        // then the fewest whose probabilities sum to ≥ top_p (1 = all)
  uint64_t seed = 0;         // the same seed, the same draws
};

struct GenerationOptions {
  int64_t max_new_tokens = 32;
  std::vector<int64_t> stop_ids;  // end-of-text ids: generation ends after producing one
  Sampling sampling;
};

// The next token from the logits [V] (fp32, host) of one position. Greedy: the argmax (the lowest
// id among equal maxima, as torch.argmax). Sampling as transformers' generate(do_sample=True) filters
// (temperature, then top-k, then top-p, keeping at least one token), then one draw from `rng`.
int32_t next_token(const float* logits, int64_t vocab, const Sampling& sampling, std::mt19937_64& rng);

// The new ids after `prompt` (the stop id included when one ends it): at most
// options.max_new_tokens, and at most `max_length` tokens of prompt and continuation together.
// `on_token` sees each new id as it is chosen. The model's parameters must be bound (Param::value)
// on `device` in `dtype`, the activation dtype.
std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, int64_t max_length,
                              const GenerationOptions& options, Device device, DType dtype,
                              const std::function<void(int32_t)>& on_token = {});

// The logits [T, V] (fp32, host) of every position of `ids` by one forward of the layers without a
// cache: what the training forward computes. The reference the cache is tested against.
Tensor full_logits(Model& model, const std::vector<int32_t>& ids, Device device, DType dtype);

}  // namespace tetra
