// Corpus: the token files a run reads, opened and checked once before training, and the windows
// each dataset offers. A shard contributes (tokens − 1) / T windows of T + 1 tokens at stride T
// from its own token 0: a window never straddles two shards (the < T tokens at a shard's end that
// do not fill a window are not trained on). A dataset's windows are its shards' windows in order;
// with data.val_fraction, each training dataset's last windows are held out as the validation set.
//
// Opening checks every shard (missing, not a token file, wrong magic, truncated, vocabulary larger
// than the model's, shorter than one window): each is an error naming the file. Token ids are
// checked as windows are read (TokenDataset::read, or the loader's readers: fail_bad_token).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/data_spec.h"
#include "data/token_dataset.h"

namespace tetra::data {

class GdsFile;

// One token file, as the loader's readers need it.
struct Shard {
  std::string path;
  std::string data_path;     // the file raw reads open (TokenDataset::data_path(): PREFIX.bin of a Megatron dataset)
  std::string format;        // TokenDataset::format()
  int64_t tokens = 0;        // token count
  int64_t windows = 0;       // (tokens − 1) / T
  int width = 2;             // bytes per stored token (2: uint16, 4: uint32)
  int64_t raw_offset = -1;   // byte offset of token 0 where the tokens lie raw and little-endian; -1: HDF5 decodes
  int64_t limit = 0;         // ids must be < limit (0: only the int32 range is checked)
  bool limit_from_model = false;

  bool raw() const { return raw_offset >= 0; }

  // Reads tokens [offset, offset + count) into dst as `dst_width`-byte little-endian unsigned ids
  // (2 only from a uint16 file; 4 from any). Raw files: pread on a descriptor shared by all threads
  // (thread-safe); others: HDF5 under this shard's lock. Returns the bytes read from the file.
  // Does not check ids (see check_ids); fails naming the file on I/O errors and short files.
  int64_t read(int64_t offset, int64_t count, void* dst, int dst_width) const;

  // Opens the buffered descriptor for read() (raw files) — once; later calls do nothing.
  void open_descriptor();
  // The GPUDirect Storage handle of this file (O_DIRECT, registered with cuFile), opened on demand.
  GdsFile& gds();

  Shard();
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

 private:
  int fd_ = -1;
  std::unique_ptr<TokenDataset> decoded_;  // kept open only when HDF5 must decode (raw_offset < 0)
  mutable std::mutex decode_mutex_;        // TokenDataset::read is not thread-safe
  std::unique_ptr<GdsFile> gds_;
  std::mutex gds_mutex_;
  friend class Corpus;
};

// A window of a shard: tokens [offset, offset + T + 1) of shards[shard].
struct RowRef {
  int shard = 0;
  int64_t offset = 0;
  bool operator==(const RowRef&) const = default;
};

// The windows of one dataset: runs of consecutive windows of shards, concatenated.
class WindowSet {
 public:
  struct Segment {
    int shard = 0;
    int64_t first = 0;  // first window of the shard in this set
    int64_t count = 0;
  };
  void add(const Segment& s);
  int64_t size() const { return total_; }
  const std::vector<Segment>& segments() const { return segments_; }
  // Window `w` (0 <= w < size()) as a shard and token offset, for windows of seq_len + 1 tokens.
  RowRef locate(int64_t w, int64_t seq_len) const;
  // The first `n` windows / the windows from `n` on, as sets of their own.
  WindowSet head(int64_t n) const;
  WindowSet tail_from(int64_t n) const;

 private:
  std::vector<Segment> segments_;
  std::vector<int64_t> starts_;  // window index where each segment begins
  int64_t total_ = 0;
};

struct CorpusOptions {
  DataSpec train;             // required
  DataSpec val;               // empty: none (or val_fraction)
  double val_fraction = 0;    // hold out this share of each training dataset's windows (its tail)
  int64_t seq_len = 0;        // T
  int64_t model_vocab = 0;    // > 0: every shard is checked against it (TokenDataset::check_vocab)
};

class Corpus {
 public:
  explicit Corpus(const CorpusOptions& options);

  int64_t seq_len() const { return seq_len_; }
  const std::vector<std::unique_ptr<Shard>>& shards() const { return shards_; }
  Shard& shard(int i) const { return *shards_[static_cast<size_t>(i)]; }
  // Training: one window set per dataset of the blend, and the blend's weights (as given).
  const std::vector<WindowSet>& train() const { return train_; }
  const std::vector<double>& weights() const { return weights_; }
  bool is_blend() const { return train_.size() > 1; }
  // Validation windows (data.val or the held-out tails), or null.
  const WindowSet* val() const { return val_ ? &*val_ : nullptr; }
  const std::string& val_origin() const { return val_origin_; }  // "data.val" or "data.val_fraction"

  // "3 shards, 2 datasets (weights 0.7, 0.3), 1234567 tokens, 1205 windows of 1025 tokens".
  std::string describe_train() const;
  // A short hash of every training shard's path and size, the weights and T: two runs with the
  // same fingerprint read the same token stream for the same (seed, shuffle, batch).
  std::string fingerprint() const;

 private:
  int open_shard(const std::string& path, const std::string& key);
  WindowSet open_dataset(const SourceSpec& source, const std::string& key);

  int64_t seq_len_;
  int64_t model_vocab_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<WindowSet> train_;
  std::vector<double> weights_;
  std::unique_ptr<WindowSet> val_;
  std::string val_origin_;
};

// Raises this process's open-file limit (soft, up to the hard limit) so that `needed` more
// descriptors fit; fails naming `what` when the hard limit is too low.
void ensure_file_descriptors(int64_t needed, const std::string& what);

}  // namespace tetra::data
