// DataLoader: what the trainer reads its micro-batches from. It opens and checks every token file
// of data.train / data.val (Corpus), orders the windows (Sampler: shards, blends, shuffle, ranks,
// micro-batches; the position is the step number), chooses the read path (data.io → IoChoice), and
// runs one LoaderPipeline for training and one for validation, reading ahead of the trainer into
// device memory. batch() returns int32 inputs/targets [micro_batch, seq_len] on the run's device,
// ready on the caller's current stream, and the seconds the call blocked (the step's data_wait).
//
// The synchronous BatchLoader (batch_loader.h) stays as the simple host-side reference.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/data_spec.h"
#include "data/io_path.h"
#include "data/loader_pipeline.h"
#include "data/sampler.h"

namespace tetra::data {

struct DataLoaderOptions {
  DataSpec train;              // data.train
  DataSpec val;                // data.val (empty: none)
  double val_fraction = 0;     // data.val_fraction: hold out each training dataset's tail
  SamplerConfig sampler;       // seq_len, batches, dp rank and size, shuffle, seed
  int64_t model_vocab = 0;     // > 0: files are checked against it
  Device device = Device::cpu();
  std::string io = "auto";     // data.io
  int threads = 2;             // data.loader_threads
  int prefetch = 4;            // data.prefetch: micro-batches read ahead
  int64_t eval_batches = 0;    // global batches one evaluation reads; 0: all the validation set holds
};

struct LoadedBatch {
  Tensor inputs;   // int32 [micro_batch, seq_len] on the run's device: token ids fed to the model
  Tensor targets;  // int32 [micro_batch, seq_len]: the next token of each input
  double wait_s = 0;  // seconds the call blocked because the data was not read yet
};

class DataLoader {
 public:
  explicit DataLoader(const DataLoaderOptions& options);
  ~DataLoader();

  // Begins reading ahead from `step` (the resumed position): call once the start step is known.
  void start(int64_t step);

  // Micro-batch `micro` of optimizer step `step` on this rank. Valid until the next batch() call
  // (its buffers are then reused); asking out of order restarts the read-ahead there.
  LoadedBatch batch(int64_t step, int micro);
  // Micro-batch `micro` of validation batch `b` (0 <= b < num_eval_batches()): batch b is windows
  // [b·B, (b+1)·B) of the validation set in order, split over ranks and micro-batches as training.
  LoadedBatch eval_batch(int64_t b, int micro);

  bool has_validation() const { return val_ != nullptr; }
  int64_t num_eval_batches() const { return eval_period_; }
  int accumulation_steps() const { return sampler_->accumulation_steps(); }
  int64_t tokens_per_step() const { return o_.sampler.global_batch * o_.sampler.seq_len; }  // over all ranks

  const IoChoice& io() const { return io_; }
  const Corpus& corpus() const { return *corpus_; }
  // Lines for rank 0's log: the data, the validation set, the read path and why.
  std::vector<std::string> describe() const;
  LoaderStats stats() const { return train_->stats(); }
  LoaderStats eval_stats() const;

 private:
  DataLoaderOptions o_;
  std::shared_ptr<Corpus> corpus_;
  IoChoice io_;
  std::string gds_note_;  // file system and buffer registration, for the log
  std::mutex plan_mu_;     // the samplers cache permutations: one reader thread at a time
  std::unique_ptr<Sampler> sampler_, val_sampler_;
  int64_t eval_period_ = 0;  // validation batches per evaluation
  int64_t eval_next_ = 0;    // the validation unit expected next
  std::unique_ptr<LoaderPipeline> train_, val_;
};

}  // namespace tetra::data
