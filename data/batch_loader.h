// BatchLoader: fills this rank's micro-batches of token ids on the host, in the Sampler's order.
// inputs[b, t] = window_b[t] and targets[b, t] = window_b[t + 1] (int32 [micro_batch, seq_len],
// CPU). One buffer pair per micro-batch index is allocated up front and reused, so a step can hold
// all its micro-batches at once (pipeline schedules do) and loading allocates nothing.
//
// Synchronous today: batch() reads from the file when called. Callers depend only on the
// contract below, so a prefetching pipeline (reader threads, pinned buffers, direct-to-GPU reads)
// can replace the internals without changing them.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "data/sampler.h"
#include "data/token_dataset.h"
#include "runtime/tensor.h"

namespace tetra::data {

struct HostBatch {
  Tensor inputs;   // int32 [micro_batch, seq_len] on the CPU: token ids fed to the model
  Tensor targets;  // int32 [micro_batch, seq_len] on the CPU: the next token of each input
};

class BatchLoader {
 public:
  // Training batches from `train` in the order of Sampler(config, train->size()).
  // model_vocab > 0 checks the dataset against the model's vocabulary (TokenDataset::check_vocab).
  BatchLoader(std::unique_ptr<TokenDataset> train, const SamplerConfig& config, int64_t model_vocab);

  // Adds the validation set: its windows in file order (no shuffle), split over ranks and
  // micro-batches exactly as training batches are. Fails if it holds less than one global batch.
  void set_validation(std::unique_ptr<TokenDataset> val);
  bool has_validation() const { return val_ != nullptr; }

  // Micro-batch `micro` (0 <= micro < accumulation_steps()) of optimizer step `step`, on this rank.
  // The tensors view the loader's buffer for index `micro`: they stay valid, unchanged, until
  // batch() is called again with the same `micro` (eval_batch uses separate buffers).
  HostBatch batch(int64_t step, int micro);

  // Micro-batch `micro` of validation batch `batch_index` (0 <= batch_index < num_eval_batches()):
  // validation batch b is windows [b·B, (b+1)·B) of the validation set, in order. Same lifetime
  // rule as batch(), over its own buffers.
  HostBatch eval_batch(int64_t batch_index, int micro);
  // Whole global batches the validation set holds (windows never repeat within one evaluation).
  int64_t num_eval_batches() const;

  const Sampler& sampler() const { return train_sampler_; }
  int accumulation_steps() const { return train_sampler_.accumulation_steps(); }
  int64_t tokens_per_step() const { return config_.global_batch * config_.seq_len; }  // over all ranks
  const TokenDataset& dataset() const { return *train_; }
  const TokenDataset* validation() const { return val_.get(); }

 private:
  struct Buffers {
    std::vector<HostBatch> micro;  // one per micro-batch index
  };
  Buffers make_buffers() const;
  // Reads the windows at starts_ into buffers.micro[micro] and returns (views of) them.
  HostBatch fill(TokenDataset& dataset, Buffers& buffers, int micro);

  SamplerConfig config_;
  int64_t model_vocab_;
  std::unique_ptr<TokenDataset> train_;
  Sampler train_sampler_;
  std::unique_ptr<TokenDataset> val_;
  std::unique_ptr<Sampler> val_sampler_;
  Buffers train_buffers_, val_buffers_;
  std::vector<int64_t> starts_;  // window offsets of the micro-batch being filled
  std::vector<int32_t> window_;  // one window of seq_len + 1 tokens
};

}  // namespace tetra::data
