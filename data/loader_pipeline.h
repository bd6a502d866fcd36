// LoaderPipeline: reads micro-batches ahead of the trainer. A plan says which windows make up each
// unit (a micro-batch, numbered in the order the trainer consumes them); `threads` reader threads
// take the next unit, read its windows (coalescing adjacent windows of a shard into one read) into
// a ring slot by the chosen path (io_path.h), and hand it to the device on the loader's copy stream
// (device_ring.h); the trainer's get(unit) blocks only if that unit is not read yet, and its stream
// waits on the slot's `ready` event only if the copy is still running.
//
// The ring holds prefetch + 1 slots: the one the trainer is using and `prefetch` read ahead. A slot
// is released when the trainer asks for the next unit (so a batch stays valid until then); readers
// never run more than `prefetch` units ahead of the one in use. With prefetch = 0 a unit is read
// when it is asked for. All buffers are allocated at construction: nothing per step.
//
// Host paths (pinned, posix) and the page cache: a unit of several runs (a shuffled micro-batch: one
// run per window) announces all of them with posix_fadvise(POSIX_FADV_WILLNEED) before reading the
// first, so the kernel has every window of the unit in flight at once instead of one per reader
// thread; the reads then wait on I/O already under way. A hint changes no byte read. It needs a
// descriptor of each raw file of its own (Shard keeps its one private); these are opened at
// construction while they leave the open-file limit headroom, else the loader reads without hints.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/corpus.h"
#include "data/io_path.h"
#include "data/token_widen.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace tetra::data {

class DeviceRing;
class GdsBufferRegistration;

// Fills rows[0..micro_batch) with the windows of unit `unit`. Called from reader threads, one unit
// at a time per thread: it must be thread-safe.
using UnitPlan = std::function<void(int64_t unit, RowRef* rows)>;

struct PipelineOptions {
  std::string name = "train";   // for messages: "train", "validation"
  Device device = Device::cpu();
  IoPath path = IoPath::Posix;
  int64_t micro_batch = 1;
  int64_t seq_len = 1;
  int threads = 1;
  int prefetch = 0;
};

struct LoaderStats {
  int64_t units = 0;        // micro-batches handed out
  int64_t rows = 0;         // windows handed out
  int64_t file_bytes = 0;   // bytes read from files (gds: with the 4 KiB alignment)
  int64_t token_bytes = 0;  // bytes of the windows' tokens as stored (rows · (T + 1) · width)
  int64_t reads = 0;        // read calls: one per run of adjacent windows
  int64_t hinted = 0;       // runs announced with POSIX_FADV_WILLNEED before the unit's reads
  double read_s = 0;        // seconds reader threads spent reading (summed over threads)
  double wait_s = 0;        // seconds get() blocked because its unit was not read yet
  int64_t waits = 0;        // get() calls that blocked
  int64_t filled = 0;       // units whose read has finished (their slot is ready to hand out)
  int64_t device_late = 0;  // CUDA: units whose copy to the device was still running when handed out
};

class LoaderPipeline {
 public:
  LoaderPipeline(std::shared_ptr<Corpus> corpus, UnitPlan plan, const PipelineOptions& options);
  ~LoaderPipeline();
  LoaderPipeline(const LoaderPipeline&) = delete;
  LoaderPipeline& operator=(const LoaderPipeline&) = delete;

  // Starts (or restarts) reading ahead from `unit`: what was read for other units is dropped. A
  // no-op when the pipeline already reads ahead from `unit` and has handed nothing out.
  void start(int64_t unit);

  struct Batch {
    Tensor inputs;   // int32 [micro_batch, seq_len] on the device (host tensors on the CPU backend)
    Tensor targets;  // int32 [micro_batch, seq_len]: inputs shifted by one token
    double wait_s = 0;  // host seconds this call blocked for the data
  };
  // Unit `unit`, ready on the caller's current stream; valid until the next get(). Releases the
  // unit handed out before. Asking for another unit than the one after the last restarts there.
  // A read error of this unit (bad id, I/O) is rethrown here, naming the file and offset.
  Batch get(int64_t unit);

  LoaderStats stats() const;
  const PipelineOptions& options() const { return o_; }
  int ring_slots() const { return ring_; }
  int token_width() const { return width_; }
  // Bytes of file a slot's staging holds at most (the per-slot buffer size).
  size_t staging_bytes() const { return staging_bytes_; }
  // gds: whether the device staging is registered with cuFile (direct DMA) or not (bounce buffers).
  std::string staging_note() const;
  // Host paths: whether units of several runs are announced to the kernel (POSIX_FADV_WILLNEED).
  bool read_hints() const { return hints_.on; }

 private:
  struct Run {
    int shard;
    int64_t offset, tokens;  // tokens [offset, offset + tokens) of the shard
    int first_row, rows;
  };
  struct Slot {
    int64_t unit = -1;
    bool done = false;
    std::exception_ptr error;
    std::vector<RowRef> rows;
    std::vector<Run> runs;                    // rows coalesced into reads (capacity micro_batch)
    std::vector<StagedRow> staged;            // CPU backend: the row table
    std::vector<unsigned char> host_staging;  // CPU backend: raw ids
    Tensor inputs, targets;                   // CPU backend: the batch handed out
  };
  void reader_loop();
  void fill(int64_t unit, int slot);
  void fill_host(Slot& s, int slot, const std::vector<Run>& runs);
  void fill_gds(Slot& s, int slot, const std::vector<Run>& runs);
  [[noreturn]] void fail_bad(const Slot& s, int64_t flat, uint32_t id) const;
  void restart_locked(std::unique_lock<std::mutex>& lk, int64_t unit);

  // Descriptors used only for POSIX_FADV_WILLNEED (the page cache is the file's, whichever
  // descriptor asks): one per raw shard, -1 for the others; closed with the pipeline.
  struct HintFiles {
    std::vector<int> fd;
    bool on = false;
    HintFiles() = default;
    HintFiles(const HintFiles&) = delete;
    HintFiles& operator=(const HintFiles&) = delete;
    ~HintFiles();
    void open(const Corpus& corpus);
  };
  int64_t hint_runs(const std::vector<Run>& runs) const;

  std::shared_ptr<Corpus> corpus_;
  UnitPlan plan_;
  PipelineOptions o_;
  int ring_ = 1;
  int width_ = 4;  // bytes per staged id: 2 when every shard stores uint16 raw, else 4
  size_t staging_bytes_ = 0;
  std::vector<Slot> slots_;
  std::unique_ptr<DeviceRing> device_ring_;
  std::unique_ptr<GdsBufferRegistration> gds_registration_;
  HintFiles hints_;

  mutable std::mutex mu_;
  std::condition_variable cv_fill_;  // readers: a unit may be claimed, or stop
  std::condition_variable cv_done_;  // get(): a unit finished
  bool running_ = false, stop_ = false;
  int64_t next_fill_ = 0;  // next unit a reader claims
  int64_t released_ = 0;   // units below this are released (their slots are free)
  int64_t in_flight_ = 0;  // units being read
  int64_t expected_ = -1;  // the unit get() expects next
  int64_t handed_ = -1;    // the unit the trainer holds, or -1
  LoaderStats stats_;      // under mu_
  std::vector<std::thread> threads_;
};

}  // namespace tetra::data
