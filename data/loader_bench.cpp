#include "data/loader_bench.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

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

  const double cpu0 = cpu_seconds(), t0 = now_s();
  loader.start(0);
  int64_t checksum = 0;
  for (int64_t u = 0; u < units; ++u) {
    LoadedBatch batch = loader.batch(u, 0);
    if (b.device.is_cpu()) checksum += batch.inputs.data<int32_t>()[0];  // touch the data
  }
  device_synchronize(b.device);  // the last copies and widenings have landed
  const double wall = now_s() - t0, cpu = cpu_seconds() - cpu0;
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
      {"seconds", wall},
      {"gb_per_s", gb / wall},
      {"read_gb_per_s", static_cast<double>(s.file_bytes) / 1e9 / wall},
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

}  // namespace tetra::data
