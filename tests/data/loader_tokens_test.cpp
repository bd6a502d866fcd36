// The loader delivers exactly the tokens the documented order names, read directly from the files,
// through every read path this machine has (posix on the CPU backend; loader_gpu_test.cpp runs the
// pinned and gds paths on a GPU): single files of every format, several shards, blends, shuffle,
// ranks and micro-batches, reader threads and prefetch depths; and as the old BatchLoader did.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>

#include "data/batch_loader.h"
#include "loader_test_util.h"

namespace tetra::data::loadertest {
namespace {

struct Case {
  std::vector<std::vector<TokenFile>> datasets;  // one entry per dataset of the blend
  std::vector<double> weights;                   // empty: one dataset
};

DataLoaderOptions options_for(const Case& c, int64_t T, int64_t B, int64_t mb, int rank, int dp, bool shuffle) {
  DataLoaderOptions o;
  for (size_t d = 0; d < c.datasets.size(); ++d) {
    SourceSpec s = spec_of(c.datasets[d]).sources[0];
    if (!c.weights.empty()) s.weight = c.weights[d];
    o.train.sources.push_back(s);
  }
  o.train.blend = !c.weights.empty();
  o.sampler = {.seq_len = T, .global_batch = B, .micro_batch = mb, .dp_rank = rank, .dp_size = dp,
               .shuffle = shuffle, .seed = 77};
  o.model_vocab = 1024;
  o.io = "posix";
  return o;
}

// Runs `steps` steps through a loader built from `o` and checks every row against the rules.
void check_stream(const Case& c, const DataLoaderOptions& o, int64_t steps, const std::string& what) {
  std::vector<TokenFile> all;
  std::vector<std::vector<Window>> sets;
  for (const auto& files : c.datasets) {
    sets.push_back(dataset_windows(files, static_cast<int>(all.size()), o.sampler.seq_len));
    all.insert(all.end(), files.begin(), files.end());
  }
  DataLoader loader(o);
  loader.start(0);
  const SamplerConfig& sc = o.sampler;
  const int accum = loader.accumulation_steps();
  for (int64_t step = 0; step < steps; ++step)
    for (int k = 0; k < accum; ++k) {
      LoadedBatch b = loader.batch(step, k);
      ASSERT_EQ(b.inputs.shape(), (Shape{sc.micro_batch, sc.seq_len}));
      ASSERT_EQ(b.inputs.dtype(), DType::I32);
      ASSERT_TRUE(b.inputs.device().is_cpu());
      const HostRows h = to_host(b);
      const int64_t first = step * sc.global_batch + sc.dp_rank * (sc.global_batch / sc.dp_size) + k * sc.micro_batch;
      for (int64_t r = 0; r < sc.micro_batch; ++r)
        expect_row(h, r, sc.seq_len, all, expected_window(sets, c.weights, sc.shuffle, sc.seed, first + r),
                   what + " step " + std::to_string(step) + " micro " + std::to_string(k));
    }
}

TEST(LoaderTokens, EveryFormatSingleFileShuffledOrNotMatchesADirectRead) {
  ScratchDir dir;
  const int64_t T = 16;
  const std::vector<std::pair<Kind, std::string>> kinds = {
      {Kind::Bin, "a.bin"}, {Kind::H5U16, "a16.h5"}, {Kind::H5U32, "a32.h5"}, {Kind::H5Chunked, "agz.h5"}};
  for (const auto& [kind, name] : kinds) {
    Case c{{{make_file(dir, name, kind, T * 23 + 5, 1)}}, {}};
    for (bool shuffle : {false, true})
      for (int rank = 0; rank < 2; ++rank)
        check_stream(c, options_for(c, T, 8, 2, rank, 2, shuffle), 9,  // 72 slots: into epoch 4 of 23 windows
                     name + (shuffle ? " shuffled" : "") + " rank " + std::to_string(rank));
  }
}

TEST(LoaderTokens, ThreadsAndPrefetchDepthsDoNotChangeTheStream) {
  ScratchDir dir;
  const int64_t T = 8;
  Case c{{{make_file(dir, "x.bin", Kind::Bin, T * 40 + 1, 2), make_file(dir, "y.h5", Kind::H5U16, T * 17 + 3, 3)}}, {}};
  for (int threads : {1, 2, 5})
    for (int prefetch : {0, 1, 4, 9}) {
      DataLoaderOptions o = options_for(c, T, 12, 3, 0, 1, true);
      o.threads = threads;
      o.prefetch = prefetch;
      check_stream(c, o, 12, "threads " + std::to_string(threads) + " prefetch " + std::to_string(prefetch));
    }
}

TEST(LoaderTokens, ShardsAreConcatenatedAndWindowsNeverStraddleThem) {
  ScratchDir dir;
  const int64_t T = 10;
  // 3 shards of 31, 25 and 11 tokens: 3, 2 and 1 windows of 11 tokens. Tokens 21..24 of the second
  // shard fill no window and are not trained on; no window joins one shard's end to the next's start.
  Case c{{{make_file(dir, "s0.bin", Kind::Bin, 31, 10), make_file(dir, "s1.h5", Kind::H5U16, 25, 11),
           make_file(dir, "s2.bin", Kind::Bin, 11, 12)}},
         {}};
  DataLoaderOptions o = options_for(c, T, 6, 6, 0, 1, false);
  DataLoader loader(o);
  EXPECT_THAT(loader.corpus().describe_train(), ::testing::HasSubstr("3 shards, 67 tokens, 6 windows of 11 tokens"));
  const HostRows h = to_host(loader.batch(0, 0));  // one step = the 6 windows in order
  const std::vector<Window> want = {{0, 0}, {0, 10}, {0, 20}, {1, 0}, {1, 10}, {2, 0}};
  for (int64_t r = 0; r < 6; ++r) expect_row(h, r, T, c.datasets[0], want[static_cast<size_t>(r)], "shards");
  // Multi-shard, mixed formats, shuffled, several ranks and micro-batches.
  for (int rank = 0; rank < 3; ++rank) check_stream(c, options_for(c, T, 6, 1, rank, 3, true), 8, "shards shuffled");
}

TEST(LoaderTokens, BlendsDrawFromEachDatasetInItsOwnOrder) {
  ScratchDir dir;
  const int64_t T = 8;
  Case c{{{make_file(dir, "big_0.bin", Kind::Bin, T * 50 + 1, 20), make_file(dir, "big_1.h5", Kind::H5U32, T * 9 + 2, 21)},
          {make_file(dir, "small.h5", Kind::H5U16, T * 7 + 1, 22)},
          {make_file(dir, "gz.h5", Kind::H5Chunked, T * 13 + 1, 23)}},
         {0.6, 0.3, 0.1}};
  for (bool shuffle : {false, true})
    for (int rank = 0; rank < 2; ++rank)
      check_stream(c, options_for(c, T, 8, 2, rank, 2, shuffle), 25, std::string("blend") + (shuffle ? " shuffled" : ""));
}

TEST(LoaderTokens, ValidationBatchesAreTheFirstWindowsInOrderAndRepeatPerEvaluation) {
  ScratchDir dir;
  const int64_t T = 8;
  const TokenFile train = make_file(dir, "train.bin", Kind::Bin, T * 30 + 1, 30);
  const std::vector<TokenFile> val = {make_file(dir, "v0.h5", Kind::H5U16, T * 9 + 1, 31),
                                      make_file(dir, "v1.bin", Kind::Bin, T * 12 + 4, 32)};
  for (int rank = 0; rank < 2; ++rank) {
    DataLoaderOptions o = options_for({{{train}}, {}}, T, 4, 1, rank, 2, true);
    o.val = spec_of(val);
    o.val.key = "data.val";
    o.eval_batches = 3;
    DataLoader loader(o);
    ASSERT_TRUE(loader.has_validation());
    ASSERT_EQ(loader.num_eval_batches(), 3);  // 21 windows hold 5 batches of 4; an evaluation reads 3
    const std::vector<Window> windows = dataset_windows(val, 0, T);
    for (int round = 0; round < 3; ++round) {
      // Training in between does not disturb the validation stream (its own pipeline and buffers).
      to_host(loader.batch(round, 0));
      for (int64_t b = 0; b < 3; ++b)
        for (int k = 0; k < 2; ++k) {
          const HostRows h = to_host(loader.eval_batch(b, k));
          expect_row(h, 0, T, val, windows[static_cast<size_t>(4 * b + 2 * rank + k)], "validation");
        }
    }
    EXPECT_THAT(testing::error_of([&] { loader.eval_batch(3, 0); }), ::testing::HasSubstr("reads 3 batches"));
  }
}

TEST(LoaderTokens, ValFractionHoldsOutTheTailOfEachDataset) {
  ScratchDir dir;
  const int64_t T = 4;
  const TokenFile a = make_file(dir, "a.bin", Kind::Bin, T * 20 + 1, 40);  // 20 windows: 2 held out at 0.1
  const TokenFile b0 = make_file(dir, "b0.bin", Kind::Bin, T * 6 + 1, 41);  // 6 + 4 windows: 1 held out
  const TokenFile b1 = make_file(dir, "b1.bin", Kind::Bin, T * 4 + 1, 42);
  DataLoaderOptions o = options_for({{{a}, {b0, b1}}, {0.5, 0.5}}, T, 3, 1, 0, 1, false);
  o.val_fraction = 0.1;
  DataLoader loader(o);
  ASSERT_EQ(loader.corpus().train()[0].size(), 18);
  ASSERT_EQ(loader.corpus().train()[1].size(), 9);
  ASSERT_EQ(loader.num_eval_batches(), 1);  // 3 held-out windows: a's 18, 19, then b1's 3
  const std::vector<TokenFile> files = {a, b0, b1};
  const std::vector<Window> held = {{0, 18 * T}, {0, 19 * T}, {2, 3 * T}};
  for (int k = 0; k < 3; ++k) expect_row(to_host(loader.eval_batch(0, k)), 0, T, files, held[static_cast<size_t>(k)], "held out");
  // No training slot ever draws a held-out window.
  std::vector<std::vector<Window>> sets = {dataset_windows({a}, 0, T), dataset_windows({b0, b1}, 1, T)};
  sets[0].resize(18);
  sets[1].resize(9);
  for (int64_t step = 0; step < 40; ++step)
    for (int k = 0; k < 3; ++k)
      expect_row(to_host(loader.batch(step, k)), 0, T, files,
                 expected_window(sets, {0.5, 0.5}, false, 77, step * 3 + k), "train with holdout");
}

TEST(LoaderTokens, SameBatchesAsTheSynchronousBatchLoader) {
  ScratchDir dir;
  const int64_t T = 16;
  const TokenFile f = make_file(dir, "t.h5", Kind::H5U16, T * 31 + 1, 50);
  for (bool shuffle : {false, true}) {
    SamplerConfig sc{.seq_len = T, .global_batch = 8, .micro_batch = 2, .dp_rank = 1, .dp_size = 2, .shuffle = shuffle,
                     .seed = 5};
    BatchLoader reference(TokenDataset::open(f.path), sc, 1000);
    DataLoaderOptions o;
    o.train = DataSpec::single(f.path);
    o.sampler = sc;
    o.model_vocab = 1000;
    DataLoader loader(o);
    loader.start(0);
    for (int64_t step = 0; step < 20; ++step)
      for (int k = 0; k < 2; ++k) {
        const HostBatch want = reference.batch(step, k);
        const HostRows got = to_host(loader.batch(step, k));
        ASSERT_EQ(got.inputs, std::vector<int32_t>(want.inputs.data<int32_t>(), want.inputs.data<int32_t>() + 2 * T));
        ASSERT_EQ(got.targets, std::vector<int32_t>(want.targets.data<int32_t>(), want.targets.data<int32_t>() + 2 * T));
      }
  }
}

TEST(LoaderTokens, ManyShardsFitUnderALowOpenFileLimit) {
  // 300 shards under a soft limit of 128 open files: the loader raises the soft limit (up to the
  // hard one) instead of failing half-way through opening them.
  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 1024) GTEST_SKIP() << "hard open-file limit below 1024";
  ScratchDir dir;
  const int64_t T = 4;
  std::vector<TokenFile> files;
  for (int i = 0; i < 300; ++i)
    files.push_back(make_file(dir, "s_" + std::to_string(1000 + i) + ".bin", Kind::Bin, T * 2 + 1, i));
  struct rlimit low = saved;
  low.rlim_cur = 128;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  {
    DataLoaderOptions o;
    o.train = DataSpec::single(dir.file("s_*.bin"));
    o.sampler = {.seq_len = T, .global_batch = 4, .micro_batch = 4, .dp_rank = 0, .dp_size = 1};
    DataLoader loader(o);
    const HostRows h = to_host(loader.batch(149, 0));  // windows 596..599: shards 298 and 299
    expect_row(h, 3, T, files, {299, T}, "last shard");
  }
  setrlimit(RLIMIT_NOFILE, &saved);
}

}  // namespace
}  // namespace tetra::data::loadertest
