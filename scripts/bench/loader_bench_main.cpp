// tetra_loader_bench: one run of the loader benchmark (scripts/bench/loader_bench.h), as one JSON line.
//   tetra_loader_bench --files a.bin "b_*.bin" --io pinned --device cuda --order shuffled
//   tetra_loader_bench --random-read --files "b_*.bin" --seq-len 1024 --threads 8 --seconds 3
//     (the disk's random O_DIRECT read rate at one window per request; no loader)
#include <CLI/CLI.hpp>
#include <iostream>

#include "scripts/bench/loader_bench.h"
#include "runtime/error.h"

namespace {

// Runs one benchmark and prints its JSON line: exit 0, or 1 with the error on stderr.
template <class Run>
int print_result(Run run) {
  try {
    std::cout << run().dump() << std::endl;
  } catch (const tetra::Error& e) {
    std::cerr << "tetra_loader_bench: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"read a token set in training order through one read path; print JSON"};
  tetra::data::LoaderBenchOptions o;
  std::string device = "auto", order = "shuffled";
  bool keep_cache = false;
  app.add_option("--files", o.files, "token files or globs (one dataset)")->required();
  app.add_option("--io", o.io, "auto, gds, pinned or posix")->default_val("auto");
  app.add_option("--device", device, "auto (cuda where a GPU is visible), cpu or cuda")->default_val("auto");
  app.add_option("--seq-len", o.seq_len, "tokens per sequence")->default_val(1024);
  app.add_option("--micro-batch", o.micro_batch, "sequences per micro-batch")->default_val(16);
  app.add_option("--threads", o.threads, "reader threads")->default_val(4);
  app.add_option("--prefetch", o.prefetch, "micro-batches read ahead")->default_val(8);
  app.add_option("--order", order, "shuffled (training order) or sequential")->default_val("shuffled");
  app.add_option("--max-gb", o.max_gb, "stop after this many GB of tokens; 0 = one epoch")->default_val(0);
  app.add_flag("--keep-page-cache", keep_cache, "do not drop the files' pages before the run");
  bool random_read = false;
  double seconds = 3;
  app.add_flag("--random-read", random_read,
               "measure the disk instead: random O_DIRECT reads of one window (rounded up to 4 KiB), "
               "--threads at a time, for --seconds or --max-gb (default 1)");
  app.add_option("--seconds", seconds, "--random-read: how long")->default_val(3);
  CLI11_PARSE(app, argc, argv);
  if (random_read) {
    tetra::data::RandomReadOptions r;
    r.files = o.files;
    r.seq_len = o.seq_len;
    r.threads = o.threads;
    r.seconds = seconds;
    r.max_gb = o.max_gb > 0 ? o.max_gb : 1.0;
    return print_result([&] { return tetra::data::run_random_read_bench(r); });
  }
  if (order != "shuffled" && order != "sequential") {
    std::cerr << "tetra_loader_bench: --order must be shuffled or sequential\n";
    return 2;
  }
  o.shuffle = order == "shuffled";
  o.drop_cache = !keep_cache;
  const bool gpu = tetra::cuda_available();
  if (device == "cuda" && !gpu) {
    std::cerr << "tetra_loader_bench: --device cuda, but no GPU is visible\n";
    return 2;
  }
  o.device = device == "cpu" || (device == "auto" && !gpu) ? tetra::Device::cpu() : tetra::Device::cuda(0);
  return print_result([&] { return tetra::data::run_loader_bench(o); });
}
