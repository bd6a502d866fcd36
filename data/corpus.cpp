#include "data/corpus.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "data/gds_file.h"
#include "runtime/error.h"

namespace tetra::data {

static_assert(std::endian::native == std::endian::little, "token files are read raw on little-endian hosts only");

// ---- Shard ------------------------------------------------------------------------------------

Shard::Shard() = default;

Shard::~Shard() {
  gds_.reset();  // deregisters from cuFile before its descriptor closes
  if (fd_ >= 0) ::close(fd_);
}

void Shard::open_descriptor() {
  if (!raw() || fd_ >= 0) return;
  fd_ = ::open(data_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) TETRA_FAIL(Data, "cannot open dataset ", data_path, " for reading: ", std::strerror(errno));
}

GdsFile& Shard::gds() {
  std::lock_guard<std::mutex> lock(gds_mutex_);
  if (!gds_) gds_ = std::make_unique<GdsFile>(data_path);
  return *gds_;
}

namespace {

// pread until `bytes` are in, or fail naming the file and the offset.
void pread_exact(int fd, void* dst, int64_t bytes, int64_t at, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    ssize_t got = ::pread(fd, p, static_cast<size_t>(bytes), static_cast<off_t>(at));
    if (got < 0) {
      if (errno == EINTR) continue;
      TETRA_FAIL(Data, "cannot read dataset ", path, " at byte ", at, ": ", std::strerror(errno));
    }
    if (got == 0)
      TETRA_FAIL(Data, "dataset ", path, " ended early at byte ", at, " (was the file truncated while training?)");
    p += got;
    at += got;
    bytes -= got;
  }
}

}  // namespace

int64_t Shard::read(int64_t offset, int64_t count, void* dst, int dst_width) const {
  TETRA_CHECK(offset >= 0 && count >= 0 && offset + count <= tokens, "read of tokens [", offset, ", ",
              offset + count, ") outside ", path, " (", tokens, " tokens)");
  TETRA_CHECK(dst_width == 4 || (dst_width == 2 && width == 2), "reading ", width, "-byte tokens of ", path,
              " as ", dst_width, "-byte ids");
  if (!raw()) {
    std::lock_guard<std::mutex> lock(decode_mutex_);
    decoded_->read(offset, count, static_cast<int32_t*>(dst));  // widened by HDF5, ids checked
    return count * width;
  }
  TETRA_CHECK(fd_ >= 0, "dataset ", path, " read before open_descriptor()");
  const int64_t at = raw_offset + offset * width;
  if (width == dst_width) {
    pread_exact(fd_, dst, count * width, at, path);
    return count * width;
  }
  // uint16 file into 4-byte ids: read into a per-thread scratch, then widen.
  thread_local std::vector<uint16_t> scratch;
  if (scratch.size() < static_cast<size_t>(count)) scratch.resize(static_cast<size_t>(count));
  pread_exact(fd_, scratch.data(), count * 2, at, path);
  uint32_t* out = static_cast<uint32_t*>(dst);
  for (int64_t i = 0; i < count; ++i) out[i] = scratch[static_cast<size_t>(i)];
  return count * 2;
}

// ---- WindowSet --------------------------------------------------------------------------------

void WindowSet::add(const Segment& s) {
  if (s.count <= 0) return;
  starts_.push_back(total_);
  segments_.push_back(s);
  total_ += s.count;
}

RowRef WindowSet::locate(int64_t w, int64_t seq_len) const {
  TETRA_CHECK(w >= 0 && w < total_, "window ", w, " outside [0, ", total_, ")");
  // The last segment starting at or before w.
  const size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), w) - starts_.begin()) - 1;
  const Segment& s = segments_[i];
  return {s.shard, (s.first + (w - starts_[i])) * seq_len};
}

WindowSet WindowSet::head(int64_t n) const {
  WindowSet out;
  for (size_t i = 0; i < segments_.size() && out.total_ < n; ++i) {
    Segment s = segments_[i];
    s.count = std::min(s.count, n - out.total_);
    out.add(s);
  }
  return out;
}

WindowSet WindowSet::tail_from(int64_t n) const {
  WindowSet out;
  for (size_t i = 0; i < segments_.size(); ++i) {
    Segment s = segments_[i];
    const int64_t begin = starts_[i], end = begin + s.count;
    if (end <= n) continue;
    if (begin < n) {
      s.first += n - begin;
      s.count -= n - begin;
    }
    out.add(s);
  }
  return out;
}

// ---- Corpus -----------------------------------------------------------------------------------

int Corpus::open_shard(const std::string& path, const std::string& key) {
  std::unique_ptr<TokenDataset> ds = TokenDataset::open(path);  // missing, magic, truncated: named errors
  if (model_vocab_ > 0) ds->check_vocab(model_vocab_);
  auto shard = std::make_unique<Shard>();
  shard->path = path;
  shard->data_path = ds->data_path();
  shard->format = ds->format();
  shard->tokens = ds->size();
  shard->windows = ds->size() >= 1 ? (ds->size() - 1) / seq_len_ : 0;
  shard->width = ds->token_bytes();
  shard->raw_offset = ds->contiguous_offset();
  shard->limit = ds->id_limit();
  shard->limit_from_model = ds->limit_from_model();
  if (shard->windows < 1)
    TETRA_FAIL(Data, key, ": dataset ", path, " is shorter than one window: ", shard->tokens,
               " tokens, but a sequence of length ", seq_len_, " needs ", seq_len_ + 1,
               "; use more data in this file, drop it from the list, or use a shorter sequence length");
  if (shard->raw()) {
    // The raw bytes must all be in the file (an HDF5 file cut short keeps its header intact).
    struct stat st {};
    const std::string& raw_file = shard->data_path;
    if (::stat(raw_file.c_str(), &st) != 0)
      TETRA_FAIL(Data, "cannot stat dataset ", raw_file, ": ", std::strerror(errno));
    const int64_t need = shard->raw_offset + shard->tokens * shard->width;
    if (static_cast<int64_t>(st.st_size) < need)
      TETRA_FAIL(Data, "dataset ", raw_file, " is truncated: its ", shard->tokens, " tokens end at byte ", need,
                 " but the file has ", static_cast<int64_t>(st.st_size), " bytes; re-create or re-download it");
  } else {
    shard->decoded_ = std::move(ds);  // HDF5 decodes (chunked, compressed or big-endian) on every read
  }
  shards_.push_back(std::move(shard));
  return static_cast<int>(shards_.size()) - 1;
}

WindowSet Corpus::open_dataset(const SourceSpec& source, const std::string& key) {
  WindowSet set;
  const std::vector<std::string> files = expand_shards(source, key);
  // HDF5 keeps files it must decode open; the readers add one descriptor per file later.
  ensure_file_descriptors(2 * static_cast<int64_t>(files.size()), "the " + key + " shards");
  for (const std::string& path : files) {
    const int i = open_shard(path, key);
    set.add({i, 0, shards_[static_cast<size_t>(i)]->windows});
  }
  return set;
}

Corpus::Corpus(const CorpusOptions& o) : seq_len_(o.seq_len), model_vocab_(o.model_vocab) {
  TETRA_CHECK(o.seq_len > 0, "sequence length ", o.seq_len);
  if (o.train.empty()) TETRA_FAIL(Config, o.train.key, ": not set; a training run needs token files");
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))
    TETRA_FAIL(Config, "data.val_fraction: ", o.val_fraction, " is outside [0, 1)");
  if (o.val_fraction > 0 && !o.val.empty())
    TETRA_FAIL(Config, "data.val_fraction and data.val are both set; hold out a share of the training data or name "
               "a validation set, not both");
  for (const SourceSpec& s : o.train.sources) {
    train_.push_back(open_dataset(s, o.train.key));
    weights_.push_back(s.weight);
  }
  if (!o.val.empty()) {
    if (o.val.blend)
      TETRA_FAIL(Config, o.val.key, ": validation data cannot be a weighted blend; list its shards without weights");
    WindowSet v;
    for (const SourceSpec& s : o.val.sources) {
      const WindowSet part = open_dataset(s, o.val.key);
      for (const WindowSet::Segment& seg : part.segments()) v.add(seg);
    }
    val_ = std::make_unique<WindowSet>(std::move(v));
    val_origin_ = o.val.key;
  } else if (o.val_fraction > 0) {
    // The tail of each training dataset: ceil(f·W) windows, at least one, leaving at least one.
    WindowSet v;
    for (size_t d = 0; d < train_.size(); ++d) {
      const int64_t w = train_[d].size();
      const int64_t held = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(o.val_fraction * static_cast<double>(w))));
      if (held >= w)
        TETRA_FAIL(Config, "data.val_fraction: ", o.val_fraction, " of dataset ", d + 1, " (", w,
                   " windows) leaves no window to train on; use a smaller fraction or more data");
      const WindowSet tail = train_[d].tail_from(w - held);
      for (const WindowSet::Segment& seg : tail.segments()) v.add(seg);
      train_[d] = train_[d].head(w - held);
    }
    val_ = std::make_unique<WindowSet>(std::move(v));
    val_origin_ = "data.val_fraction";
  }
}

std::string Corpus::describe_train() const {
  int64_t tokens = 0, windows = 0;
  std::vector<bool> used(shards_.size(), false);
  int shards = 0;
  for (const WindowSet& set : train_) {
    windows += set.size();
    for (const WindowSet::Segment& s : set.segments())
      if (!used[static_cast<size_t>(s.shard)]) {
        used[static_cast<size_t>(s.shard)] = true;
        tokens += shards_[static_cast<size_t>(s.shard)]->tokens;
        ++shards;
      }
  }
  std::string out = std::to_string(shards) + (shards == 1 ? " shard" : " shards");
  if (train_.size() > 1) {
    out += ", " + std::to_string(train_.size()) + " datasets (weights";
    for (size_t d = 0; d < weights_.size(); ++d) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%g", d ? ", " : " ", weights_[d]);
      out += buf;
    }
    out += ")";
  }
  return out + ", " + std::to_string(tokens) + " tokens, " + std::to_string(windows) + " windows of " +
         std::to_string(seq_len_ + 1) + " tokens";
}

std::string Corpus::fingerprint() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  auto mix = [&](const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  mix(&seq_len_, sizeof seq_len_);
  for (size_t d = 0; d < train_.size(); ++d) {
    mix(&weights_[d], sizeof(double));
    for (const WindowSet::Segment& s : train_[d].segments()) {
      const Shard& sh = *shards_[static_cast<size_t>(s.shard)];
      const std::string name = std::filesystem::path(sh.path).filename().string();
      mix(name.data(), name.size());
      mix(&sh.tokens, sizeof sh.tokens);
      mix(&s.first, sizeof s.first);
      mix(&s.count, sizeof s.count);
    }
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void ensure_file_descriptors(int64_t needed, const std::string& what) {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  // Count what is open now: the descriptors below the limit that answer fcntl.
  int64_t open_now = 0;
  for (rlim_t fd = 0; fd < rl.rlim_cur && fd < 65536; ++fd)
    if (::fcntl(static_cast<int>(fd), F_GETFD) != -1) ++open_now;
  const rlim_t want = static_cast<rlim_t>(open_now + needed + 64);
  if (want <= rl.rlim_cur) return;
  if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max)
    TETRA_FAIL(Data, what, " needs ", needed, " more open files but the limit is ", rl.rlim_max,
               " (", open_now, " open); raise it with `ulimit -n ", want, "` or merge shards");
  rl.rlim_cur = want;
  if (::setrlimit(RLIMIT_NOFILE, &rl) != 0)
    TETRA_FAIL(Data, what, " needs ", needed, " more open files; raising the limit to ", want, " failed: ",
               std::strerror(errno), "; raise it with `ulimit -n`");
}

}  // namespace tetra::data
