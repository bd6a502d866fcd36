#include "scripts/bench/loader_bench.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "data/corpus.h"
#include "data/data_loader.h"
#include "runtime/error.h"
#include "runtime/stream.h"

namespace tetra::data {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double cpu_seconds() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Bytes this process has had fetched from storage (/proc/self/io read_bytes: buffered misses,
// read-ahead and O_DIRECT alike, whichever thread asked), or -1 where the kernel does not say.
int64_t storage_read_bytes() {
  std::FILE* f = std::fopen("/proc/self/io", "r");
  if (!f) return -1;
  char line[128];
  long long v = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "read_bytes: %lld", &v) == 1) break;
  std::fclose(f);
  return v;
}

}  // namespace

double page_cache_resident(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  double share = -1;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    const size_t bytes = static_cast<size_t>(st.st_size);
    void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      std::vector<unsigned char> vec((bytes + page - 1) / page);
      if (::mincore(map, bytes, vec.data()) == 0) {
        size_t in = 0;
        for (unsigned char v : vec) in += v & 1;
        share = static_cast<double>(in) / static_cast<double>(vec.size());
      }
      ::munmap(map, bytes);
    }
  }
  ::close(fd);
  return share;
}

bool drop_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  (void)::fdatasync(fd);  // dirty pages cannot be dropped: write them back first
  const bool ok = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

nlohmann::json run_loader_bench(const LoaderBenchOptions& b) {
  DataLoaderOptions o;
  o.train.sources.push_back({b.files, 1.0});
  o.sampler = {.seq_len = b.seq_len, .global_batch = b.micro_batch, .micro_batch = b.micro_batch, .dp_rank = 0,
               .dp_size = 1, .shuffle = b.shuffle, .seed = 1234};
  o.device = b.device;
  o.io = b.io;
  o.threads = b.threads;
  o.prefetch = b.prefetch;

  // Open (and check) the files before dropping their pages: opening reads headers only.
  DataLoader loader(o);
  std::vector<std::string> paths;
  int64_t file_bytes_total = 0;
  for (const auto& sh : loader.corpus().shards()) {
    paths.push_back(sh->path);
    struct stat st {};
    if (::stat(sh->path.c_str(), &st) == 0) file_bytes_total += static_cast<int64_t>(st.st_size);
  }
  bool dropped = true;
  if (b.drop_cache)
    for (const std::string& p : paths) dropped = drop_page_cache(p) && dropped;
  auto resident = [&] {
    double sum = 0;
    int n = 0;
    for (const std::string& p : paths)
      if (double r = page_cache_resident(p); r >= 0) sum += r, ++n;
    return n ? sum / n : -1.0;
  };
  const double resident_before = resident();

  const int64_t windows = loader.corpus().train()[0].size();
  const int64_t width = loader.corpus().shards().front()->width;
  int64_t units = windows / b.micro_batch;
  if (b.max_gb > 0) {
    const double unit_bytes = static_cast<double>(b.micro_batch * (b.seq_len + 1) * width);
    units = std::min<int64_t>(units, static_cast<int64_t>(b.max_gb * 1e9 / unit_bytes) + 1);
  }
  TETRA_CHECK(units > 0, "the benchmark's files hold fewer windows than one micro-batch");

  const int64_t storage0 = storage_read_bytes();
  const double cpu0 = cpu_seconds(), t0 = now_s();
  loader.start(0);
  int64_t checksum = 0;
  for (int64_t u = 0; u < units; ++u) {
    LoadedBatch batch = loader.batch(u, 0);
    if (b.device.is_cpu()) checksum += batch.inputs.data<int32_t>()[0];  // touch the data
  }
  device_synchronize(b.device);  // the last copies and widenings have landed
  const double wall = now_s() - t0, cpu = cpu_seconds() - cpu0;
  const int64_t storage1 = storage_read_bytes();
  const int64_t storage = storage0 >= 0 && storage1 >= 0 ? storage1 - storage0 : -1;
  const LoaderStats s = loader.stats();
  // Delivered: the windows handed out (the readers may have read a few micro-batches further).
  const int64_t token_bytes = s.rows * (b.seq_len + 1) * width;
  const double gb = static_cast<double>(token_bytes) / 1e9;

  nlohmann::json out = {
      {"io", io_path_name(loader.io().path)},
      {"io_reason", loader.io().reason},
      {"compat_mode", loader.io().compat_mode},
      {"device", b.device.str()},
      {"order", b.shuffle ? "shuffled" : "sequential"},
      {"files", static_cast<int64_t>(paths.size())},
      {"file_bytes", file_bytes_total},
      {"seq_len", b.seq_len},
      {"micro_batch", b.micro_batch},
      {"threads", b.threads},
      {"prefetch", b.prefetch},
      {"micro_batches", s.units},
      {"tokens", s.rows * b.seq_len},
      {"token_bytes", token_bytes},
      {"bytes_read", s.file_bytes},
      {"reads", s.reads},
      {"hinted_runs", s.hinted},
      {"seconds", wall},
      {"gb_per_s", gb / wall},
      {"read_gb_per_s", static_cast<double>(s.file_bytes) / 1e9 / wall},
      // What the disk delivered (page-granular misses and read-ahead, or O_DIRECT blocks): on a
      // shuffled whole epoch of a set the page cache holds, neighbouring windows share pages.
      {"storage_read_bytes", storage},
      {"storage_gb_per_s", storage >= 0 ? static_cast<double>(storage) / 1e9 / wall : -1.0},
      {"tokens_per_s", static_cast<double>(s.rows * b.seq_len) / wall},
      {"cpu_seconds", cpu},
      {"cpu_seconds_per_gb", gb > 0 ? cpu / gb : 0.0},
      {"consumer_wait_seconds", s.wait_s},
      {"device_late", s.device_late},
      {"page_cache",
       {{"method", b.drop_cache ? "fdatasync + posix_fadvise(POSIX_FADV_DONTNEED) per file, before the run" : "not dropped"},
        {"dropped", b.drop_cache && dropped},
        {"resident_before", resident_before},
        {"resident_after", resident()}}},
      {"checksum", checksum}};
  return out;
}

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr int64_t kAlign = 4096;

// Every file and the 4 KiB-aligned request offsets it offers (a request picks one uniformly), open
// for O_DIRECT reads where the file system takes them, else buffered with its pages dropped.
struct ReadTargets {
  struct File {
    std::string path;
    int fd = -1;
    int64_t offsets = 0;  // aligned starts with a whole request inside the file
  };
  std::vector<File> files;
  std::vector<int64_t> cumulative;  // offsets of files [0, i]
  int64_t total_offsets = 0, file_bytes = 0;
  bool direct = true;

  ReadTargets() = default;
  ReadTargets(const ReadTargets&) = delete;
  ReadTargets& operator=(const ReadTargets&) = delete;
  ~ReadTargets() { close_all(); }
  void close_all() {
    for (File& f : files)
      if (f.fd >= 0) ::close(f.fd), f.fd = -1;
  }
  int open_all(int flags) {
    for (File& f : files)
      if ((f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | flags)) < 0) return errno;
    return 0;
  }
};

void open_read_targets(const Corpus& corpus, int64_t request, ReadTargets& t) {
  for (const auto& sh : corpus.shards()) {
    struct stat st {};
    TETRA_CHECK(::stat(sh->path.c_str(), &st) == 0, "cannot stat ", sh->path);
    t.file_bytes += static_cast<int64_t>(st.st_size);
    const int64_t n = static_cast<int64_t>(st.st_size) >= request ? (st.st_size - request) / kAlign + 1 : 0;
    if (n == 0) continue;
    t.files.push_back({sh->path, -1, n});
    t.total_offsets += n;
    t.cumulative.push_back(t.total_offsets);
  }
  TETRA_CHECK(t.total_offsets > 0, "random-read bench: no file holds one request of ", request, " bytes");
  int err = t.open_all(O_DIRECT);
  if (err == 0) {  // some file systems take O_DIRECT at open and refuse it at the first read
    void* probe = std::aligned_alloc(kAlign, static_cast<size_t>(request));
    TETRA_CHECK(probe != nullptr, "out of memory");
    if (::pread(t.files[0].fd, probe, static_cast<size_t>(request), 0) < 0) err = errno;
    std::free(probe);
  }
  if (err == EINVAL) {  // no O_DIRECT here (tmpfs, some overlays): buffered reads, pages dropped first
    t.close_all();
    t.direct = false;
    err = t.open_all(0);
  }
  if (err != 0)
    TETRA_FAIL(Data, "random-read bench: cannot read the files (", t.files[0].path, ", …): ", std::strerror(err));
  if (!t.direct)
    for (ReadTargets::File& f : t.files) {
      (void)::fdatasync(f.fd);
      (void)::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
      (void)::posix_fadvise(f.fd, 0, 0, POSIX_FADV_RANDOM);  // no read-ahead around each request
    }
}

// b.threads threads, each one request of `request` bytes at a time at uniformly random offsets, until
// b.max_gb is read or b.seconds pass: every read's latency (µs) and the wall time (*wall, s).
std::vector<float> read_randomly(const ReadTargets& t, int64_t request, const RandomReadOptions& b, double* wall) {
  const int64_t max_requests =
      b.max_gb > 0 ? std::max<int64_t>(1, static_cast<int64_t>(b.max_gb * 1e9 / static_cast<double>(request))) : INT64_MAX;
  const double deadline_s = b.seconds > 0 ? b.seconds : 1e30;
  std::atomic<int64_t> issued{0};
  std::vector<std::vector<float>> latency_us(static_cast<size_t>(b.threads));
  std::vector<std::string> errors(static_cast<size_t>(b.threads));
  const double t0 = now_s();
  std::vector<std::thread> threads;
  for (int th = 0; th < b.threads; ++th)
    threads.emplace_back([&, th] {
      void* buf = std::aligned_alloc(kAlign, static_cast<size_t>(request));
      if (!buf) return void(errors[static_cast<size_t>(th)] = "out of memory");
      uint64_t rng = 0x5eed0000ull + static_cast<uint64_t>(th);
      std::vector<float>& lat = latency_us[static_cast<size_t>(th)];
      lat.reserve(1 << 16);
      while (issued.fetch_add(1, std::memory_order_relaxed) < max_requests) {
        const int64_t pick = static_cast<int64_t>(splitmix64(rng) % static_cast<uint64_t>(t.total_offsets));
        const size_t i =
            static_cast<size_t>(std::upper_bound(t.cumulative.begin(), t.cumulative.end(), pick) - t.cumulative.begin());
        const int64_t at = (pick - (i ? t.cumulative[i - 1] : 0)) * kAlign;
        const double r0 = now_s();
        const ssize_t got = ::pread(t.files[i].fd, buf, static_cast<size_t>(request), static_cast<off_t>(at));
        const double r1 = now_s();
        if (got != static_cast<ssize_t>(request)) {
          errors[static_cast<size_t>(th)] = t.files[i].path + " at byte " + std::to_string(at) + ": " +
                                            (got < 0 ? std::strerror(errno) : "short read");
          break;
        }
        lat.push_back(static_cast<float>((r1 - r0) * 1e6));
        if (r1 - t0 >= deadline_s) break;
      }
      std::free(buf);
    });
  for (std::thread& thread : threads) thread.join();
  *wall = now_s() - t0;
  for (const std::string& e : errors)
    if (!e.empty()) TETRA_FAIL(Data, "random-read bench: ", e);
  std::vector<float> all;
  for (const auto& v : latency_us) all.insert(all.end(), v.begin(), v.end());
  return all;
}

}  // namespace

nlohmann::json run_random_read_bench(const RandomReadOptions& b) {
  TETRA_CHECK(b.threads > 0 && b.seq_len > 0 && (b.seconds > 0 || b.max_gb > 0), "random-read bench: threads ",
              b.threads, ", seq_len ", b.seq_len, ", seconds ", b.seconds, ", max_gb ", b.max_gb);
  CorpusOptions co;
  co.train.sources.push_back({b.files, 1.0});
  co.seq_len = b.seq_len;
  const Corpus corpus(co);  // expands the globs and gives the token width
  const int64_t width = corpus.shards().front()->width;
  const int64_t window_bytes = (b.seq_len + 1) * width;
  const int64_t request = (window_bytes + kAlign - 1) / kAlign * kAlign;
  ReadTargets targets;
  open_read_targets(corpus, request, targets);
  double wall = 0;
  std::vector<float> all = read_randomly(targets, request, b, &wall);
  const int64_t reads = static_cast<int64_t>(all.size());
  TETRA_CHECK(reads > 0, "random-read bench: no read finished");
  double sum = 0;
  for (float x : all) sum += x;
  std::sort(all.begin(), all.end());
  auto pct = [&](double q) { return all[std::min(all.size() - 1, static_cast<size_t>(q * static_cast<double>(all.size())))]; };
  const double iops = static_cast<double>(reads) / wall;
  return {{"mode", "random_read"},
          {"method", targets.direct ? "pread O_DIRECT, one request per thread at a time" :
                                      "buffered pread after POSIX_FADV_DONTNEED, POSIX_FADV_RANDOM (no O_DIRECT here)"},
          {"direct", targets.direct},
          {"files", static_cast<int64_t>(targets.files.size())},
          {"file_bytes", targets.file_bytes},
          {"threads", b.threads},
          {"window_bytes", window_bytes},
          {"request_bytes", request},
          {"reads", reads},
          {"bytes", reads * request},
          {"seconds", wall},
          {"iops", iops},
          {"gb_per_s", iops * static_cast<double>(request) / 1e9},
          {"window_gb_per_s", iops * static_cast<double>(window_bytes) / 1e9},
          {"window_tokens_per_s", iops * static_cast<double>(b.seq_len)},
          {"latency_us", {{"mean", sum / static_cast<double>(reads)}, {"p50", pct(0.5)}, {"p99", pct(0.99)}}}};
}

}  // namespace tetra::data
