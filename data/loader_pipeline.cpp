#include "data/loader_pipeline.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "data/device_ring.h"
#include "data/gds_file.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/error.h"

namespace tetra::data {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }
int64_t round_down(int64_t v, int64_t to) { return v / to * to; }

}  // namespace

LoaderPipeline::HintFiles::~HintFiles() {
  for (int f : fd)
    if (f >= 0) ::close(f);
}

void LoaderPipeline::HintFiles::open(const Corpus& corpus) {
  // Descriptors are numbered lowest-free first: one at or above (soft limit − 256) means these
  // would eat the headroom the rest of the process needs (checkpoints, communicators). Then none.
  struct rlimit rl {};
  const bool limited = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
  const int64_t ceiling = limited ? static_cast<int64_t>(rl.rlim_cur) - 256 : INT64_MAX;
  fd.assign(corpus.shards().size(), -1);
  bool any = false;
  for (size_t i = 0; i < fd.size(); ++i) {
    const Shard& sh = *corpus.shards()[i];
    if (!sh.raw()) continue;
    fd[i] = ::open(sh.data_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd[i] < 0 || fd[i] >= ceiling) {
      for (int& f : fd)
        if (f >= 0) ::close(f), f = -1;
      return;  // read without hints
    }
    any = true;
  }
  on = any;
}

LoaderPipeline::LoaderPipeline(std::shared_ptr<Corpus> corpus, UnitPlan plan, const PipelineOptions& options)
    : corpus_(std::move(corpus)), plan_(std::move(plan)), o_(options) {
  TETRA_CHECK(corpus_ && plan_, "LoaderPipeline needs a corpus and a plan");
  TETRA_CHECK(o_.micro_batch > 0 && o_.seq_len > 0 && o_.threads > 0 && o_.prefetch >= 0, "loader options: micro_batch ",
              o_.micro_batch, ", seq_len ", o_.seq_len, ", threads ", o_.threads, ", prefetch ", o_.prefetch);
  TETRA_CHECK(o_.seq_len == corpus_->seq_len(), "pipeline seq_len ", o_.seq_len, " vs corpus ", corpus_->seq_len());
  TETRA_CHECK(o_.path != IoPath::Gds || o_.device.is_cuda(), "the gds path needs a CUDA device");
  TETRA_CHECK(o_.path != IoPath::Pinned || o_.device.is_cuda(), "the pinned path needs a CUDA device");
  ring_ = o_.prefetch + 1;

  bool all_u16 = true;
  for (const auto& sh : corpus_->shards()) {
    if (!(sh->raw() && sh->width == 2)) all_u16 = false;
    if (o_.path == IoPath::Gds)
      TETRA_CHECK(sh->raw() && sh->width == corpus_->shards().front()->width, "gds over ", sh->path,
                  ", which is not raw-readable with the common width");
    if (o_.path != IoPath::Gds) sh->open_descriptor();
  }
  width_ = o_.path == IoPath::Gds ? corpus_->shards().front()->width : (all_u16 ? 2 : 4);
  if (o_.path != IoPath::Gds) hints_.open(*corpus_);  // gds reads with O_DIRECT: no page cache to warm

  // Staging for one unit: at worst every window is a run of its own; a gds run also carries up to
  // 4 KiB of alignment at each end (gds_file.h), a host run 16 bytes of padding.
  const size_t window_bytes = static_cast<size_t>(o_.seq_len + 1) * static_cast<size_t>(width_);
  const size_t per_row = window_bytes + (o_.path == IoPath::Gds ? 2 * static_cast<size_t>(kGdsAlign) : 16);
  staging_bytes_ = round_up(per_row * static_cast<size_t>(o_.micro_batch), static_cast<size_t>(kGdsAlign));

  slots_.resize(static_cast<size_t>(ring_));
  for (Slot& s : slots_) {
    s.rows.resize(static_cast<size_t>(o_.micro_batch));
    s.runs.reserve(static_cast<size_t>(o_.micro_batch));
  }
  if (o_.device.is_cpu()) {
    for (Slot& s : slots_) {
      s.staged.resize(static_cast<size_t>(o_.micro_batch));
      s.host_staging.resize(staging_bytes_);
      s.inputs = Tensor::empty({o_.micro_batch, o_.seq_len}, DType::I32);
      s.targets = Tensor::empty({o_.micro_batch, o_.seq_len}, DType::I32);
    }
  } else {
    // Without CUDA, DeviceRing (device_ring_stub.cpp) says that the loader cannot feed the device.
    DeviceRing::Options so;
    so.device = o_.device;
    so.slots = ring_;
    so.staging_bytes = staging_bytes_;
    so.micro_batch = o_.micro_batch;
    so.seq_len = o_.seq_len;
    so.host_staging = o_.path != IoPath::Gds;
    so.pinned = o_.path == IoPath::Pinned;
    device_ring_ = std::make_unique<DeviceRing>(so);
    if (o_.path == IoPath::Gds)
      gds_registration_ =
          std::make_unique<GdsBufferRegistration>(device_ring_->device_staging_base(), device_ring_->device_staging_bytes());
  }
  for (int i = 0; i < o_.threads; ++i) threads_.emplace_back([this] { reader_loop(); });
}

LoaderPipeline::~LoaderPipeline() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_fill_.notify_all();
  for (std::thread& t : threads_) t.join();
  gds_registration_.reset();  // before the device staging it covers goes away with device_ring_
}

void LoaderPipeline::restart_locked(std::unique_lock<std::mutex>& lk, int64_t unit) {
  // Let the units being read finish (their slots are about to be reused), then start over.
  cv_done_.wait(lk, [&] { return in_flight_ == 0; });
  if (handed_ >= 0) {
    // The slot the trainer held may be refilled now: its last use is the work issued so far.
    if (device_ring_) device_ring_->release(static_cast<int>(handed_ % ring_));
    handed_ = -1;
  }
  for (Slot& s : slots_) {
    s.unit = -1;
    s.done = false;
    s.error = nullptr;
  }
  next_fill_ = released_ = expected_ = unit;
  running_ = true;
  cv_fill_.notify_all();
}

void LoaderPipeline::start(int64_t unit) {
  TETRA_CHECK(unit >= 0, "loader start at unit ", unit);
  std::unique_lock<std::mutex> lk(mu_);
  if (running_ && handed_ < 0 && expected_ == unit) return;  // already reading ahead from there
  restart_locked(lk, unit);
}

LoaderPipeline::Batch LoaderPipeline::get(int64_t unit) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!running_ || unit != expected_) restart_locked(lk, unit);
  if (handed_ >= 0) {
    if (device_ring_) device_ring_->release(static_cast<int>(handed_ % ring_));
    handed_ = -1;
  }
  released_ = unit;  // every unit before this one is done with
  cv_fill_.notify_all();

  const int index = static_cast<int>(unit % ring_);
  Slot& s = slots_[static_cast<size_t>(index)];
  auto ready = [&] { return s.unit == unit && s.done; };
  double waited = 0;
  if (!ready()) {
    const double t0 = now_s();
    cv_done_.wait(lk, ready);
    waited = now_s() - t0;
    stats_.wait_s += waited;
    ++stats_.waits;
  }
  if (s.error) {
    std::exception_ptr e = s.error;
    running_ = false;  // a retry re-reads from scratch
    std::rethrow_exception(e);
  }
  handed_ = unit;
  expected_ = unit + 1;
  ++stats_.units;
  stats_.rows += o_.micro_batch;
  Batch b;
  b.wait_s = waited;
  if (device_ring_) {
    if (device_ring_->acquire(index)) ++stats_.device_late;
    b.inputs = device_ring_->inputs(index);
    b.targets = device_ring_->targets(index);
    return b;
  }
  b.inputs = s.inputs;
  b.targets = s.targets;
  return b;
}

std::string LoaderPipeline::staging_note() const {
  return gds_registration_ ? "device staging " + gds_registration_->detail() : "";
}

LoaderStats LoaderPipeline::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void LoaderPipeline::reader_loop() {
  if (o_.device.is_cuda()) cuda::set_device(o_.device);  // cuFile and the copies use this thread's device
  for (;;) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_fill_.wait(lk, [&] { return stop_ || (running_ && next_fill_ < released_ + ring_); });
    if (stop_) return;
    const int64_t unit = next_fill_++;
    const int index = static_cast<int>(unit % ring_);
    Slot& s = slots_[static_cast<size_t>(index)];
    s.unit = unit;
    s.done = false;
    s.error = nullptr;
    ++in_flight_;
    lk.unlock();

    std::exception_ptr error;
    try {
      fill(unit, index);
    } catch (...) {
      error = std::current_exception();
    }

    lk.lock();
    s.error = error;
    s.done = true;
    ++stats_.filled;
    --in_flight_;
    cv_done_.notify_all();
  }
}

void LoaderPipeline::fill(int64_t unit, int index) {
  Slot& s = slots_[static_cast<size_t>(index)];
  plan_(unit, s.rows.data());
  // Runs of windows that follow each other in one shard are read at once (training order without
  // shuffle makes a whole micro-batch one run): window k + 1 starts T tokens after window k.
  std::vector<Run>& runs = s.runs;  // reserved at construction: no allocation here
  runs.clear();
  const int64_t T = o_.seq_len;
  for (int r = 0; r < static_cast<int>(o_.micro_batch); ++r) {
    const RowRef& row = s.rows[static_cast<size_t>(r)];
    TETRA_CHECK(row.shard >= 0 && row.shard < static_cast<int>(corpus_->shards().size()) && row.offset >= 0 &&
                    row.offset + T + 1 <= corpus_->shard(row.shard).tokens,
                "the plan put row ", r, " of unit ", unit, " at shard ", row.shard, " offset ", row.offset,
                ", outside its file");
    if (!runs.empty()) {
      Run& last = runs.back();
      if (last.shard == row.shard && last.offset + last.tokens - 1 == row.offset) {
        last.tokens += T;
        ++last.rows;
        continue;
      }
    }
    runs.push_back({row.shard, row.offset, T + 1, r, 1});
  }
  if (o_.path == IoPath::Gds)
    fill_gds(s, index, runs);
  else
    fill_host(s, index, runs);
}

void LoaderPipeline::fail_bad(const Slot& s, int64_t flat, uint32_t id) const {
  const int64_t T = o_.seq_len;
  const RowRef& row = s.rows[static_cast<size_t>(flat / (T + 1))];
  const Shard& sh = corpus_->shard(row.shard);
  fail_bad_token(sh.path, id, row.offset + flat % (T + 1), sh.limit, sh.limit_from_model);
}

int64_t LoaderPipeline::hint_runs(const std::vector<Run>& runs) const {
  // One run (a micro-batch in file order) is read at once anyway, and the kernel's own read-ahead
  // follows a sequential stream; several runs are scattered windows, each a random read.
  if (!hints_.on || runs.size() < 2) return 0;
  int64_t n = 0;
  for (const Run& run : runs) {
    const Shard& sh = corpus_->shard(run.shard);
    const int fd = hints_.fd[static_cast<size_t>(run.shard)];
    if (fd < 0) continue;
    // Advice only: a refusal changes nothing but the speed.
    if (::posix_fadvise(fd, sh.raw_offset + run.offset * sh.width, run.tokens * sh.width, POSIX_FADV_WILLNEED) == 0) ++n;
  }
  return n;
}

void LoaderPipeline::fill_host(Slot& s, int index, const std::vector<Run>& runs) {
  unsigned char* staging = nullptr;
  StagedRow* rows = nullptr;
  if (device_ring_) {
    device_ring_->wait_writable(index);  // the last copy out of this slot's host staging is done
    staging = static_cast<unsigned char*>(device_ring_->host_staging(index));
    rows = device_ring_->host_rows(index);
  } else {
    staging = s.host_staging.data();
    rows = s.staged.data();
  }
  const int64_t T = o_.seq_len;
  size_t pos = 0;
  int64_t file_bytes = 0, token_bytes = 0;
  const double t0 = now_s();
  const int64_t hinted = hint_runs(runs);
  for (const Run& run : runs) {
    const Shard& sh = corpus_->shard(run.shard);
    file_bytes += sh.read(run.offset, run.tokens, staging + pos, width_);
    for (int k = 0; k < run.rows; ++k)
      rows[run.first_row + k] = {static_cast<int64_t>(pos) + k * T * width_, sh.limit};
    token_bytes += static_cast<int64_t>(run.rows) * (T + 1) * sh.width;
    pos = round_up(pos + static_cast<size_t>(run.tokens * width_), 16);
  }
  TETRA_CHECK(pos <= staging_bytes_, "loader staging overflow: ", pos, " > ", staging_bytes_);
  const double read_s = now_s() - t0;

  // The CPU backend widens here (the CPU twin of the device kernel); CUDA checks here and widens
  // on the device. Either way every id is checked against its file's vocabulary.
  int32_t* inputs = device_ring_ ? nullptr : s.inputs.data<int32_t>();
  int32_t* targets = device_ring_ ? nullptr : s.targets.data<int32_t>();
  const int64_t bad = widen_tokens(staging, width_, rows, o_.micro_batch, T, inputs, targets);
  if (bad >= 0) fail_bad(s, bad, staged_id(staging, width_, rows, T, bad));
  if (device_ring_) device_ring_->submit(index, pos, o_.micro_batch, width_, /*check_on_device=*/false);
  std::lock_guard<std::mutex> lk(mu_);
  stats_.file_bytes += file_bytes;
  stats_.token_bytes += token_bytes;
  stats_.reads += static_cast<int64_t>(runs.size());
  stats_.hinted += hinted;
  stats_.read_s += read_s;
}

void LoaderPipeline::fill_gds(Slot& s, int index, const std::vector<Run>& runs) {
  device_ring_->wait_writable(index);  // the last widening out of this slot's device staging is done
  StagedRow* rows = device_ring_->host_rows(index);
  const int64_t T = o_.seq_len;
  const int64_t slot_base = device_ring_->device_staging_offset(index);
  int64_t pos = 0, file_bytes = 0, token_bytes = 0;
  const double t0 = now_s();
  for (const Run& run : runs) {
    Shard& sh = corpus_->shard(run.shard);
    // The 4 KiB-aligned superset of the run's bytes, so cuFile can DMA without bounce buffers.
    const int64_t begin = sh.raw_offset + run.offset * width_, end = begin + run.tokens * width_;
    const int64_t a = round_down(begin, kGdsAlign), b = static_cast<int64_t>(round_up(static_cast<size_t>(end), kGdsAlign));
    TETRA_CHECK(pos + (b - a) <= static_cast<int64_t>(staging_bytes_), "gds staging overflow");
    const int64_t got = sh.gds().read(device_ring_->device_staging_base(), static_cast<size_t>(b - a), a, slot_base + pos);
    if (got < end - a)
      TETRA_FAIL(Data, "dataset ", sh.path, " ended early: cuFileRead at byte ", a, " returned ", got, " bytes, ",
                 end - a, " needed (was the file truncated while training?)");
    for (int k = 0; k < run.rows; ++k) rows[run.first_row + k] = {pos + (begin - a) + k * T * width_, sh.limit};
    file_bytes += b - a;
    token_bytes += static_cast<int64_t>(run.rows) * (T + 1) * width_;
    pos += b - a;
  }
  const double read_s = now_s() - t0;
  // The ids are checked on the device, then widened; only the check's result comes back.
  device_ring_->submit(index, 0, o_.micro_batch, width_, /*check_on_device=*/true);
  const int64_t bad = device_ring_->device_check(index);
  if (bad >= 0) {
    const int64_t r = bad / (T + 1), t = bad % (T + 1);
    uint32_t id = 0;
    device_ring_->read_back(index, rows[r].byte_offset + t * width_, &id, static_cast<size_t>(width_));
    fail_bad(s, bad, id);
  }
  std::lock_guard<std::mutex> lk(mu_);
  stats_.file_bytes += file_bytes;
  stats_.token_bytes += token_bytes;
  stats_.reads += static_cast<int64_t>(runs.size());
  stats_.read_s += read_s;
}

}  // namespace tetra::data
