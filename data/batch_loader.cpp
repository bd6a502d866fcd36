#include "data/batch_loader.h"

#include <cstring>
#include <utility>

#include "runtime/error.h"

namespace tetra::data {

namespace {
const TokenDataset& require(const std::unique_ptr<TokenDataset>& d, const char* what) {
  TETRA_CHECK(d != nullptr, "BatchLoader needs a ", what, " dataset, got null");
  return *d;
}
}  // namespace

BatchLoader::BatchLoader(std::unique_ptr<TokenDataset> train, const SamplerConfig& config, int64_t model_vocab)
    : config_(config),
      model_vocab_(model_vocab),
      train_(std::move(train)),
      train_sampler_(config, require(train_, "training").size()) {
  if (model_vocab_ > 0) train_->check_vocab(model_vocab_);
  train_buffers_ = make_buffers();
  starts_.resize(static_cast<size_t>(config_.micro_batch));
  window_.resize(static_cast<size_t>(config_.seq_len + 1));
}

BatchLoader::Buffers BatchLoader::make_buffers() const {
  Buffers b;
  const Shape shape{config_.micro_batch, config_.seq_len};
  for (int k = 0; k < train_sampler_.accumulation_steps(); ++k)
    b.micro.push_back({Tensor::empty(shape, DType::I32), Tensor::empty(shape, DType::I32)});
  return b;
}

void BatchLoader::set_validation(std::unique_ptr<TokenDataset> val) {
  const TokenDataset& v = require(val, "validation");
  if (model_vocab_ > 0) val->check_vocab(model_vocab_);
  const int64_t windows = v.size() >= 1 ? (v.size() - 1) / config_.seq_len : 0;
  if (windows < config_.global_batch)
    TETRA_FAIL(Data, "validation dataset ", v.path(), " has ", v.size(), " tokens: ", windows, " windows of ",
               config_.seq_len + 1, " tokens, fewer than one global batch of ", config_.global_batch,
               " sequences; use a larger validation set or a smaller global batch");
  SamplerConfig c = config_;
  c.shuffle = false;
  val_sampler_ = std::make_unique<Sampler>(c, v.size());
  val_ = std::move(val);
  if (val_buffers_.micro.empty()) val_buffers_ = make_buffers();
}

int64_t BatchLoader::num_eval_batches() const {
  return val_sampler_ ? val_sampler_->num_windows() / config_.global_batch : 0;
}

HostBatch BatchLoader::batch(int64_t step, int micro) {
  train_sampler_.window_starts(step, micro, starts_.data());
  return fill(*train_, train_buffers_, micro);
}

HostBatch BatchLoader::eval_batch(int64_t batch_index, int micro) {
  if (!val_) TETRA_FAIL(Usage, "eval_batch called but no validation dataset was given (set data.val)");
  if (batch_index < 0 || batch_index >= num_eval_batches())
    TETRA_FAIL(Usage, "validation batch ", batch_index, " requested but validation dataset ", val_->path(),
               " holds only ", num_eval_batches(), " batches of ", config_.global_batch, " sequences");
  // Step b of an unshuffled sampler is exactly windows [b·B, (b+1)·B): no wrap-around below num_eval_batches.
  val_sampler_->window_starts(batch_index, micro, starts_.data());
  return fill(*val_, val_buffers_, micro);
}

HostBatch BatchLoader::fill(TokenDataset& dataset, Buffers& buffers, int micro) {
  TETRA_CHECK(micro >= 0 && micro < static_cast<int>(buffers.micro.size()), "micro-batch ", micro, " outside [0, ",
              buffers.micro.size(), ")");
  HostBatch& out = buffers.micro[static_cast<size_t>(micro)];
  const int64_t T = config_.seq_len;
  int32_t* inputs = out.inputs.data<int32_t>();
  int32_t* targets = out.targets.data<int32_t>();
  for (int64_t b = 0; b < config_.micro_batch; ++b) {
    dataset.read(starts_[static_cast<size_t>(b)], T + 1, window_.data());
    std::memcpy(inputs + b * T, window_.data(), static_cast<size_t>(T) * sizeof(int32_t));
    std::memcpy(targets + b * T, window_.data() + 1, static_cast<size_t>(T) * sizeof(int32_t));
  }
  return out;
}

}  // namespace tetra::data
