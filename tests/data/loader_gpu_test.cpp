// The loader on a GPU (label gpu; each test skips without one): the widening kernel against its
// CPU twin on random inputs with poisoned outputs; the same tokens, bit for bit, through the posix,
// pinned and (where cuFile is present) gds paths as a direct read of the files; slots are not
// overwritten while the compute stream still reads them; bad ids found on the device name the file.
#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "data/gds_file.h"
#include "data/token_widen.h"
#include "loader_test_util.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/random.h"
#include "runtime/stream.h"

#define TETRA_REQUIRE_GPU() \
  if (!::tetra::cuda_available()) GTEST_SKIP() << "no GPU"

namespace tetra::data::loadertest {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

TEST(LoaderGpu, WidenKernelMatchesTheCpuTwin) {
  TETRA_REQUIRE_GPU();
  Rng rng(11);
  for (int width : {2, 4}) {
    const int64_t T = 257, rows = 9;
    std::vector<unsigned char> staging(static_cast<size_t>(rows * (T + 1) * width + 4096));
    for (auto& b : staging) b = static_cast<unsigned char>(rng.below(256));
    if (width == 4)  // keep most uint32 ids inside a large vocabulary, some outside
      for (size_t i = 3; i < staging.size(); i += 4) staging[i] = rng.below(50) == 0 ? 0x90 : 0;
    std::vector<StagedRow> table;
    for (int64_t r = 0; r < rows; ++r)  // odd and even byte offsets, some rows overlapping
      table.push_back({static_cast<int64_t>(rng.below(staging.size() - static_cast<size_t>((T + 1) * width))),
                       r % 3 == 0 ? 0 : (width == 2 ? 60000 : 200000000)});
    std::vector<int32_t> want_in(static_cast<size_t>(rows * T)), want_tg(want_in.size());
    const int64_t want_bad = widen_tokens(staging.data(), width, table.data(), rows, T, want_in.data(), want_tg.data());

    void *d_staging, *d_rows, *d_in, *d_tg, *d_bad;
    CUDA_OK(cudaMalloc(&d_staging, staging.size()));
    CUDA_OK(cudaMalloc(&d_rows, table.size() * sizeof(StagedRow)));
    CUDA_OK(cudaMalloc(&d_in, want_in.size() * 4));
    CUDA_OK(cudaMalloc(&d_tg, want_in.size() * 4));
    CUDA_OK(cudaMalloc(&d_bad, 8));
    CUDA_OK(cudaMemcpy(d_staging, staging.data(), staging.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_rows, table.data(), table.size() * sizeof(StagedRow), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_in, 0xAB, want_in.size() * 4));  // poisoned
    CUDA_OK(cudaMemset(d_tg, 0xAB, want_in.size() * 4));
    CUDA_OK(cudaMemset(d_bad, 0xFF, 8));
    widen_tokens_cuda(d_staging, width, static_cast<StagedRow*>(d_rows), rows, T, static_cast<int32_t*>(d_in),
                      static_cast<int32_t*>(d_tg), static_cast<unsigned long long*>(d_bad), nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<int32_t> got_in(want_in.size()), got_tg(want_in.size());
    unsigned long long bad = 0;
    CUDA_OK(cudaMemcpy(got_in.data(), d_in, got_in.size() * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got_tg.data(), d_tg, got_tg.size() * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&bad, d_bad, 8, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got_in, want_in) << "width " << width;
    EXPECT_EQ(got_tg, want_tg) << "width " << width;
    ASSERT_GE(want_bad, 0) << "the random input should hold some out-of-range ids";
    EXPECT_EQ(static_cast<int64_t>(bad), want_bad) << "width " << width;
    for (void* p : {d_staging, d_rows, d_in, d_tg, d_bad}) cudaFree(p);
  }
}

// The paths to test here: posix and pinned always; gds where cuFile is present and `file` (in the
// scratch directory, under $TMPDIR) can be opened with O_DIRECT and registered — run the suite with
// TMPDIR on the NVMe (or other GDS-capable) file system to cover it.
std::vector<std::string> paths_here(const std::string& file) {
  std::vector<std::string> p = {"posix", "pinned"};
  const GdsProbe probe = gds_probe();
  if (!probe.available) {
    std::cout << "[ note     ] gds not tested: " << probe.detail << "\n";
    return p;
  }
  try {
    GdsFile f(file);
    p.push_back("gds");
    if (probe.compat_mode) std::cout << "[ note     ] gds tested in " << probe.detail << "\n";
  } catch (const Error& e) {
    std::cout << "[ note     ] gds not tested on this file system (set TMPDIR to an NVMe directory): " << e.what()
              << "\n";
  }
  return p;
}

TEST(LoaderGpu, EveryPathDeliversTheTokensOfADirectRead) {
  TETRA_REQUIRE_GPU();
  ScratchDir dir;
  const int64_t T = 64;
  // Raw-readable files only, so that gds can read them all: .bin and contiguous HDF5 (uint16).
  const std::vector<std::vector<TokenFile>> datasets = {
      {make_file(dir, "a_0.bin", Kind::Bin, T * 300 + 7, 1), make_file(dir, "a_1.h5", Kind::H5U16, T * 111 + 1, 2)},
      {make_file(dir, "b.bin", Kind::Bin, T * 50 + 1, 3)}};
  std::vector<TokenFile> all;
  std::vector<std::vector<Window>> sets;
  for (const auto& files : datasets) {
    sets.push_back(dataset_windows(files, static_cast<int>(all.size()), T));
    all.insert(all.end(), files.begin(), files.end());
  }
  for (const std::string& io : paths_here(datasets[0][0].path))
    for (bool shuffle : {false, true}) {
      DataLoaderOptions o;
      o.train.sources = {{{datasets[0][0].path, datasets[0][1].path}, 0.8}, {{datasets[1][0].path}, 0.2}};
      o.train.blend = true;
      o.sampler = {.seq_len = T, .global_batch = 16, .micro_batch = 4, .dp_rank = 1, .dp_size = 2, .shuffle = shuffle,
                   .seed = 3};
      o.model_vocab = 1000;
      o.device = Device::cuda(0);
      o.io = io;
      o.threads = 3;
      o.prefetch = 3;
      DataLoader loader(o);
      ASSERT_EQ(io_path_name(loader.io().path), io) << loader.io().reason;
      loader.start(0);
      for (int64_t step = 0; step < 40; ++step)
        for (int k = 0; k < 2; ++k) {
          LoadedBatch b = loader.batch(step, k);
          ASSERT_TRUE(b.inputs.device().is_cuda());
          const HostRows h = to_host(b);
          for (int64_t r = 0; r < 4; ++r)
            expect_row(h, r, T, all, expected_window(sets, {0.8, 0.2}, shuffle, 3, step * 16 + 8 + k * 4 + r),
                       io + (shuffle ? " shuffled" : "") + " step " + std::to_string(step));
        }
    }
}

void sleep_on_stream(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(15)); }

TEST(LoaderGpu, ASlotIsNotRefilledWhileTheComputeStreamStillReadsIt) {
  TETRA_REQUIRE_GPU();
  ScratchDir dir;
  const int64_t T = 32, mb = 2;
  const TokenFile f = make_file(dir, "s.bin", Kind::Bin, T * 200 + 1, 4);
  for (const std::string& io : paths_here(f.path)) {
    DataLoaderOptions o;
    o.train = DataSpec::single(f.path);
    o.sampler = {.seq_len = T, .global_batch = mb, .micro_batch = mb, .dp_rank = 0, .dp_size = 1};
    o.device = Device::cuda(0);
    o.io = io;
    o.threads = 2;
    o.prefetch = 1;  // two slots: the readers want to refill each one as soon as it is released
    DataLoader loader(o);
    loader.start(0);
    const Stream compute = current_stream(o.device);
    const int units = 12;
    std::vector<Tensor> copies;
    for (int u = 0; u < units; ++u) {
      LoadedBatch b = loader.batch(u, 0);
      // The compute stream reads the batch only after a delay; meanwhile the host moves on and
      // releases the slot. Without the consumed event the readers would overwrite it first.
      ASSERT_EQ(cudaLaunchHostFunc(static_cast<cudaStream_t>(compute.handle()), sleep_on_stream, nullptr), cudaSuccess);
      Tensor copy = Tensor::empty(b.inputs.shape(), DType::I32, o.device);
      ops::copy(copy, b.inputs);
      copies.push_back(copy);
    }
    device_synchronize(o.device);
    for (int u = 0; u < units; ++u) {
      Tensor host = Tensor::empty(copies[static_cast<size_t>(u)].shape(), DType::I32);
      ops::copy(host, copies[static_cast<size_t>(u)]);
      for (int64_t r = 0; r < mb; ++r) {
        const std::vector<int32_t> want = direct_read(f.path, (u * mb + r) * T, T);
        ASSERT_EQ(std::vector<int32_t>(host.data<int32_t>() + r * T, host.data<int32_t>() + (r + 1) * T), want)
            << io << " unit " << u << " row " << r;
      }
    }
  }
}

TEST(LoaderGpu, BadIdsAreFoundOnEveryPathWithFileAndOffset) {
  TETRA_REQUIRE_GPU();
  ScratchDir dir;
  const int64_t T = 16;
  std::vector<uint16_t> toks(T * 8 + 1, 9);
  toks[5 * T + 3] = 50300;  // window 5
  const std::string path = dir.file("bad.bin");
  testing::write_bin(path, {.tokens = toks});
  for (const std::string& io : paths_here(path)) {
    DataLoaderOptions o;
    o.train = DataSpec::single(path);
    o.sampler = {.seq_len = T, .global_batch = 1, .micro_batch = 1, .dp_rank = 0, .dp_size = 1};
    o.model_vocab = 50257;
    o.device = Device::cuda(0);
    o.io = io;
    DataLoader loader(o);
    for (int64_t s = 0; s < 5; ++s) loader.batch(s, 0);
    EXPECT_THAT(testing::error_of([&] { loader.batch(5, 0); }),
                AllOf(HasSubstr(path), HasSubstr("token id 50300"), HasSubstr("token offset " + std::to_string(5 * T + 3))))
        << io;
  }
}

TEST(LoaderGpu, ReadAheadMeansNoWaitAndTheDataIsOnTheDeviceInTime) {
  TETRA_REQUIRE_GPU();
  ScratchDir dir;
  const int64_t T = 128;
  const TokenFile f = make_file(dir, "w.bin", Kind::Bin, T * 400 + 1, 5);
  for (const std::string& io : paths_here(f.path)) {
    DataLoaderOptions o;
    o.train = DataSpec::single(f.path);
    o.sampler = {.seq_len = T, .global_batch = 8, .micro_batch = 8, .dp_rank = 0, .dp_size = 1, .shuffle = true};
    o.device = Device::cuda(0);
    o.io = io;
    o.prefetch = 4;
    DataLoader loader(o);
    loader.start(0);
    for (int u = 0; u < 20; ++u) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a "step" longer than a read
      EXPECT_EQ(loader.batch(u, 0).wait_s, 0.0) << io << " unit " << u;
    }
    EXPECT_EQ(loader.stats().waits, 0) << io;
    EXPECT_EQ(loader.stats().device_late, 0) << io;
  }
}

}  // namespace
}  // namespace tetra::data::loadertest
