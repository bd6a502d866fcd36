#include "data/data_loader.h"

#include <algorithm>

#include "runtime/error.h"

namespace tetra::data {

DataLoader::DataLoader(const DataLoaderOptions& options) : o_(options) {
  const SamplerConfig& sc = o_.sampler;
  const CorpusOptions co{.train = o_.train, .val = o_.val, .val_fraction = o_.val_fraction, .seq_len = sc.seq_len,
                         .model_vocab = o_.model_vocab};
  TETRA_CHECK(sc.seq_len > 0, "DataLoader needs a positive sequence length, got ", sc.seq_len);
  corpus_ = std::make_shared<Corpus>(co);

  // The order: one window count per training dataset, weights when it is a blend.
  std::vector<int64_t> windows;
  for (const WindowSet& w : corpus_->train()) windows.push_back(w.size());
  sampler_ = std::make_unique<Sampler>(sc, windows, corpus_->is_blend() ? corpus_->weights() : std::vector<double>{});

  // The read path.
  std::vector<FileLayout> layouts;
  for (const auto& sh : corpus_->shards()) layouts.push_back({sh->path, sh->raw(), sh->width});
  io_ = choose_io(o_.io, o_.device, layouts, gds_probe);
  ensure_file_descriptors(static_cast<int64_t>(corpus_->shards().size()), "the data loader");
  if (io_.path == IoPath::Gds) {
    // Register every file now: a file system without O_DIRECT or GDS support shows here, not mid-run.
    try {
      for (const auto& sh : corpus_->shards()) sh->gds();
      gds_note_ = "files on " + filesystem_of(corpus_->shards().front()->data_path);
    } catch (const Error& e) {
      if (o_.io == "gds") throw;
      io_.path = IoPath::Pinned;
      io_.compat_mode = false;
      io_.reason = std::string("auto: pinned, not gds: ") + e.what();
    }
  }

  PipelineOptions po;
  po.device = o_.device;
  po.path = io_.path;
  po.micro_batch = sc.micro_batch;
  po.seq_len = sc.seq_len;
  po.threads = std::max(1, o_.threads);
  po.prefetch = std::max(0, o_.prefetch);
  po.name = "train";
  const int accum = sampler_->accumulation_steps();
  train_ = std::make_unique<LoaderPipeline>(corpus_, [this, accum](int64_t unit, RowRef* rows) {
    thread_local std::vector<SampleRef> refs;
    refs.resize(static_cast<size_t>(o_.sampler.micro_batch));
    {
      std::lock_guard<std::mutex> lk(plan_mu_);
      sampler_->samples(unit / accum, static_cast<int>(unit % accum), refs.data());
    }
    for (size_t j = 0; j < refs.size(); ++j)
      rows[j] = corpus_->train()[static_cast<size_t>(refs[j].source)].locate(refs[j].window, o_.sampler.seq_len);
  }, po);

  if (const WindowSet* val = corpus_->val()) {
    if (val->size() < sc.global_batch)
      TETRA_FAIL(Data, "validation set (", corpus_->val_origin(), ") has ", val->size(), " windows of ", sc.seq_len + 1,
                 " tokens, fewer than one global batch of ", sc.global_batch,
                 " sequences; use a larger validation set or a smaller global batch");
    SamplerConfig vc = sc;
    vc.shuffle = false;
    val_sampler_ = std::make_unique<Sampler>(vc, std::vector<int64_t>{val->size()});
    const int64_t available = val->size() / sc.global_batch;
    eval_period_ = o_.eval_batches > 0 ? std::min(o_.eval_batches, available) : available;
    const int64_t cycle = eval_period_ * accum;  // validation units in one evaluation; then it repeats
    PipelineOptions vo = po;
    vo.name = "validation";
    vo.threads = 1;
    vo.prefetch = static_cast<int>(std::min<int64_t>(po.prefetch, cycle));
    val_ = std::make_unique<LoaderPipeline>(corpus_, [this, accum, cycle, val](int64_t unit, RowRef* rows) {
      thread_local std::vector<SampleRef> refs;
      refs.resize(static_cast<size_t>(o_.sampler.micro_batch));
      const int64_t p = unit % cycle;
      {
        std::lock_guard<std::mutex> lk(plan_mu_);
        val_sampler_->samples(p / accum, static_cast<int>(p % accum), refs.data());
      }
      for (size_t j = 0; j < refs.size(); ++j) rows[j] = val->locate(refs[j].window, o_.sampler.seq_len);
    }, vo);
  }
}

DataLoader::~DataLoader() = default;

void DataLoader::start(int64_t step) {
  TETRA_CHECK(step >= 0, "loader start at step ", step);
  train_->start(step * accumulation_steps());
  if (val_) {
    val_->start(0);
    eval_next_ = 0;
  }
}

LoadedBatch DataLoader::batch(int64_t step, int micro) {
  const int accum = accumulation_steps();
  TETRA_CHECK(step >= 0 && micro >= 0 && micro < accum, "batch(", step, ", ", micro, ") with ", accum,
              " micro-batches per step");
  LoaderPipeline::Batch b = train_->get(step * accum + micro);
  return {b.inputs, b.targets, b.wait_s};
}

LoadedBatch DataLoader::eval_batch(int64_t batch_index, int micro) {
  if (!val_) TETRA_FAIL(Usage, "eval_batch called but no validation data was given (set data.val or data.val_fraction)");
  const int accum = accumulation_steps();
  if (batch_index < 0 || batch_index >= eval_period_)
    TETRA_FAIL(Usage, "validation batch ", batch_index, " requested but one evaluation reads ", eval_period_,
               " batches of ", o_.sampler.global_batch, " sequences");
  TETRA_CHECK(micro >= 0 && micro < accum, "micro-batch ", micro, " outside [0, ", accum, ")");
  // Evaluations repeat the same cycle of units; the pipeline reads the next cycle ahead.
  const int64_t cycle = eval_period_ * accum, p = batch_index * accum + micro;
  const int64_t unit = eval_next_ % cycle == p ? eval_next_ : p;
  eval_next_ = unit + 1;
  LoaderPipeline::Batch b = val_->get(unit);
  return {b.inputs, b.targets, b.wait_s};
}

LoaderStats DataLoader::eval_stats() const { return val_ ? val_->stats() : LoaderStats{}; }

std::vector<std::string> DataLoader::describe() const {
  std::vector<std::string> lines;
  lines.push_back("data: train " + corpus_->describe_train() + " (fingerprint " + corpus_->fingerprint() + ")");
  if (const WindowSet* v = corpus_->val())
    lines.push_back("data: validation " + std::to_string(v->size()) + " windows from " + corpus_->val_origin() + ", " +
                    std::to_string(eval_period_) + " batches per evaluation");
  std::string io = std::string("data: read path ") + io_path_name(io_.path) +
                   (io_.compat_mode ? " (cuFile COMPATIBILITY MODE: no direct DMA)" : "") + " — " + io_.reason;
  lines.push_back(io);
  std::string pipe = "data: " + std::to_string(train_->options().threads) + " reader thread" +
                     (train_->options().threads == 1 ? "" : "s") + ", prefetch " +
                     std::to_string(train_->options().prefetch) + " micro-batches (" +
                     std::to_string(train_->ring_slots()) + " ring slots of " +
                     std::to_string(train_->staging_bytes() / 1024) + " KiB staging, uint" +
                     std::to_string(8 * train_->token_width()) + " ids widened to int32 " +
                     (o_.device.is_cuda() ? "on the device" : "on the host") + ")";
  if (!gds_note_.empty()) pipe += "; " + gds_note_;
  if (std::string note = train_->staging_note(); !note.empty()) pipe += "; " + note;
  lines.push_back(pipe);
  return lines;
}

}  // namespace tetra::data
