// The loader benchmark (scripts/bench/loader.sh runs it through scripts/bench/loader_bench_main.cpp):
// reads a token set in training order through one read path into device memory, with no model in
// the way, and reports GB/s, tokens/s and CPU seconds per GB as JSON. The page cache is dropped for
// every file first (fdatasync, then posix_fadvise POSIX_FADV_DONTNEED) and the resident share of
// the files is measured (mincore) before and after, so a run cannot read from memory unnoticed.
// run_random_read_bench measures the disk's own random-read rate at one window per request.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/device.h"

namespace tetra::data {

struct LoaderBenchOptions {
  std::vector<std::string> files;  // token files or globs: one dataset
  std::string io = "auto";
  Device device = Device::cpu();
  int64_t seq_len = 1024;
  int64_t micro_batch = 16;
  int threads = 4;
  int prefetch = 8;
  bool shuffle = true;        // training order (shuffled windows) or file order
  double max_gb = 0;          // stop after this many GB of tokens delivered; 0: one epoch
  bool drop_cache = true;
};

nlohmann::json run_loader_bench(const LoaderBenchOptions& options);

// The disk's random-read rate for requests of one window: `threads` threads each pread one
// request at a time with O_DIRECT (4 KiB-aligned buffer) at uniformly random 4 KiB-aligned offsets
// of the files (weighted by size), for `seconds` or `max_gb` GB, whichever comes first. The request
// is one window of the files ((seq_len + 1) · token width) rounded up to 4 KiB. Reports GB/s, IOPS,
// latency, and window_gb_per_s = IOPS × window bytes: the token rate a loader making one read per
// window could reach at this queue depth — the physical floor beside the shuffled order. A file
// system without O_DIRECT falls back to buffered reads after dropping the files' pages (and says so).
struct RandomReadOptions {
  std::vector<std::string> files;  // token files or globs
  int64_t seq_len = 1024;
  int threads = 4;
  double seconds = 3;
  double max_gb = 1;
};
nlohmann::json run_random_read_bench(const RandomReadOptions& options);

// Share of the file's pages in the page cache (0..1), or -1 when it cannot be measured.
double page_cache_resident(const std::string& path);
// Writes back and drops the file's pages from the page cache; false when the kernel refused.
bool drop_page_cache(const std::string& path);

}  // namespace tetra::data
