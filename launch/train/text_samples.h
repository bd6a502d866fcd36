// log.sample_every: rank 0 prints the model's greedy continuation of log.sample_prompt every N steps,
// to see a run learn (as llm.c and Megatron users sample from their checkpoints). The model's own
// working weights generate (models/generation.h) with a key/value cache, between steps; the ranks
// other than 0 do nothing. Needs the whole model on rank 0 (launch/config/validate.cpp refuses pp,
// tp, ep > 1 and ZeRO-3).
#pragma once
#include <cstdint>
#include <memory>
#include <ostream>
#include <vector>

#include "data/tokenizers/tokenizer.h"
#include "launch/config/config.h"
#include "models/model.h"

namespace tetra::launch {

class TextSamples {
 public:
  // Reads the tokenizer (log.sample_tokenizer; "" = model.init_from's tokenizer.json, else byte) and
  // encodes the prompt; throws a Config error naming the key for a tokenizer that cannot be read or
  // a prompt that leaves no room within model.seq_len.
  TextSamples(const Config& cfg, Device device, DType dtype);
  // After step `step` (0-based) of the run.
  bool due(int64_t step) const;
  // "sample at step N: TEXT" (the prompt and its continuation, escaped onto one line).
  void print(Model& model, int64_t step, std::ostream& out) const;

 private:
  const Config& cfg_;
  Device device_;
  DType dtype_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::vector<int32_t> prompt_;
};

}  // namespace tetra::launch
