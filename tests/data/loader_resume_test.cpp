// Resuming: the loader's position is the step number. A loader started at step k (as after a
// restart from a checkpoint of step k) continues the token stream exactly where a loader that ran
// through steps 0..k−1 is — with shards, blends, shuffle, several ranks — and asking for steps out
// of order restarts the read-ahead without changing what is read.
#include <gtest/gtest.h>

#include "loader_test_util.h"

namespace tetra::data::loadertest {
namespace {

DataLoaderOptions blend_options(const ScratchDir& dir, int rank, int prefetch) {
  static const int64_t T = 8;
  DataLoaderOptions o;
  o.train.blend = true;
  o.train.sources = {{{dir.file("a_0.bin"), dir.file("a_1.h5")}, 0.7}, {{dir.file("b_*.bin")}, 0.3}};
  o.sampler = {.seq_len = T, .global_batch = 8, .micro_batch = 2, .dp_rank = rank, .dp_size = 2, .shuffle = true,
               .seed = 2024};
  o.model_vocab = 1000;
  o.prefetch = prefetch;
  o.threads = 2;
  return o;
}

void make_blend_files(const ScratchDir& dir) {
  make_file(dir, "a_0.bin", Kind::Bin, 8 * 21 + 1, 1);
  make_file(dir, "a_1.h5", Kind::H5U16, 8 * 10 + 3, 2);
  make_file(dir, "b_0.bin", Kind::Bin, 8 * 5 + 1, 3);
  make_file(dir, "b_1.bin", Kind::Bin, 8 * 6 + 7, 4);
}

std::vector<HostRows> run_steps(DataLoader& loader, int64_t from, int64_t to) {
  std::vector<HostRows> out;
  for (int64_t step = from; step < to; ++step)
    for (int k = 0; k < loader.accumulation_steps(); ++k) out.push_back(to_host(loader.batch(step, k)));
  return out;
}

TEST(LoaderResume, StartingAtStepKContinuesTheStreamExactly) {
  ScratchDir dir;
  make_blend_files(dir);
  const int64_t steps = 30;  // 240 sequences: several epochs of both datasets
  for (int rank = 0; rank < 2; ++rank) {
    DataLoader straight(blend_options(dir, rank, 4));
    straight.start(0);
    const std::vector<HostRows> all = run_steps(straight, 0, steps);
    for (int64_t k : {1, 7, 13, 29}) {
      // "Stop after k steps": a first loader reads steps 0..k−1 and is destroyed mid-prefetch.
      {
        DataLoader first(blend_options(dir, rank, 3));
        first.start(0);
        const std::vector<HostRows> head = run_steps(first, 0, k);
        for (size_t i = 0; i < head.size(); ++i) ASSERT_EQ(head[i].inputs, all[i].inputs);
      }
      // "Resume from the sampler state": a fresh loader told only the step number.
      DataLoader resumed(blend_options(dir, rank, 3));
      resumed.start(k);
      const std::vector<HostRows> tail = run_steps(resumed, k, steps);
      for (size_t i = 0; i < tail.size(); ++i) {
        const size_t at = static_cast<size_t>(k * 2) + i;
        ASSERT_EQ(tail[i].inputs, all[at].inputs) << "rank " << rank << " resumed at " << k << ", unit " << at;
        ASSERT_EQ(tail[i].targets, all[at].targets) << "rank " << rank << " resumed at " << k << ", unit " << at;
      }
    }
  }
}

TEST(LoaderResume, OutOfOrderRequestsRestartTheReadAheadAndReadTheSameTokens) {
  ScratchDir dir;
  make_blend_files(dir);
  DataLoader straight(blend_options(dir, 1, 4));
  const std::vector<HostRows> all = run_steps(straight, 0, 20);
  DataLoader jumping(blend_options(dir, 1, 4));
  jumping.start(5);  // then asked for something else first: the read-ahead restarts
  for (int64_t step : {3, 4, 17, 2, 2, 19, 0, 11, 12}) {
    for (int k = 0; k < 2; ++k) {
      const HostRows h = to_host(jumping.batch(step, k));
      ASSERT_EQ(h.inputs, all[static_cast<size_t>(step * 2 + k)].inputs) << "step " << step << " micro " << k;
    }
  }
}

TEST(LoaderResume, TheFingerprintNamesTheTokenStream) {
  ScratchDir dir;
  make_blend_files(dir);
  const std::string fp = DataLoader(blend_options(dir, 0, 1)).corpus().fingerprint();
  EXPECT_EQ(DataLoader(blend_options(dir, 1, 4)).corpus().fingerprint(), fp);  // rank and prefetch do not matter
  DataLoaderOptions reweighted = blend_options(dir, 0, 1);
  reweighted.train.sources[1].weight = 0.31;
  EXPECT_NE(DataLoader(reweighted).corpus().fingerprint(), fp);
  make_file(dir, "b_2.bin", Kind::Bin, 8 * 3 + 1, 5);  // the glob now matches one more shard
  EXPECT_NE(DataLoader(blend_options(dir, 0, 1)).corpus().fingerprint(), fp);
}

}  // namespace
}  // namespace tetra::data::loadertest
