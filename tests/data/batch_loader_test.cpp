// BatchLoader: inputs/targets are the sampler's windows shifted by one, buffers are reused per
// micro-batch index, validation batches are the first windows in order, and bad setups fail.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "data/batch_loader.h"
#include "data_fixtures.h"
#include "runtime/error.h"

namespace tetra::data {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::error_of;
using testing::ScratchDir;

// Token i of the test stream: distinct enough that any misplaced window shows.
uint64_t token_at(int64_t i) { return static_cast<uint64_t>((i * 131 + 7) % 997); }

std::string write_stream(const ScratchDir& dir, const std::string& name, int64_t n) {
  testing::H5Spec spec;
  for (int64_t i = 0; i < n; ++i) spec.tokens.push_back(token_at(i));
  spec.vocab_size = 1000;
  spec.tokenizer = "test";
  const std::string path = dir.file(name);
  testing::write_h5(path, spec);
  return path;
}

SamplerConfig config(int rank, int dp, bool shuffle) {
  return SamplerConfig{.seq_len = 16, .global_batch = 8, .micro_batch = 2, .dp_rank = rank, .dp_size = dp,
                       .shuffle = shuffle, .seed = 99};
}

void expect_batch_matches(const HostBatch& b, const std::vector<int64_t>& starts, int64_t T) {
  ASSERT_EQ(b.inputs.dtype(), DType::I32);
  ASSERT_EQ(b.targets.dtype(), DType::I32);
  ASSERT_TRUE(b.inputs.device().is_cpu());
  ASSERT_EQ(b.inputs.shape(), (Shape{static_cast<int64_t>(starts.size()), T}));
  ASSERT_EQ(b.targets.shape(), b.inputs.shape());
  const int32_t* in = b.inputs.data<int32_t>();
  const int32_t* tg = b.targets.data<int32_t>();
  for (size_t r = 0; r < starts.size(); ++r)
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(in[static_cast<int64_t>(r) * T + t], static_cast<int32_t>(token_at(starts[r] + t))) << "row " << r;
      ASSERT_EQ(tg[static_cast<int64_t>(r) * T + t], static_cast<int32_t>(token_at(starts[r] + t + 1))) << "row " << r;
    }
}

TEST(DataBatchLoader, BatchesAreTheSamplersWindowsShiftedByOne) {
  ScratchDir dir;
  const std::string path = write_stream(dir, "train.h5", 16 * 20 + 1);  // 20 windows
  for (bool shuffle : {false, true}) {
    for (int rank = 0; rank < 2; ++rank) {
      BatchLoader loader(TokenDataset::open(path), config(rank, 2, shuffle), 1024);
      Sampler sampler(config(rank, 2, shuffle), 16 * 20 + 1);
      ASSERT_EQ(loader.accumulation_steps(), 2);
      EXPECT_EQ(loader.tokens_per_step(), 8 * 16);
      for (int64_t step = 0; step < 7; ++step)  // 56 slots: wraps into epoch 2
        for (int k = 0; k < 2; ++k) expect_batch_matches(loader.batch(step, k), sampler.window_starts(step, k), 16);
    }
  }
}

TEST(DataBatchLoader, BuffersAreReusedPerMicroBatchIndex) {
  ScratchDir dir;
  const std::string path = write_stream(dir, "train.h5", 16 * 20 + 1);
  BatchLoader loader(TokenDataset::open(path), config(0, 1, false), 0);
  Sampler sampler(config(0, 1, false), 16 * 20 + 1);
  ASSERT_EQ(loader.accumulation_steps(), 4);
  HostBatch m0 = loader.batch(0, 0);
  HostBatch m1 = loader.batch(0, 1);
  EXPECT_NE(m0.inputs.data_ptr(), m1.inputs.data_ptr());
  // Loading micro-batch 1 (and 2, 3) leaves micro-batch 0 intact: a step can hold all of them.
  loader.batch(0, 2);
  loader.batch(0, 3);
  expect_batch_matches(m0, sampler.window_starts(0, 0), 16);
  // The next step's micro-batch 0 lands in the same memory.
  HostBatch next = loader.batch(1, 0);
  EXPECT_EQ(next.inputs.data_ptr(), m0.inputs.data_ptr());
  EXPECT_EQ(next.targets.data_ptr(), m0.targets.data_ptr());
  expect_batch_matches(m0, sampler.window_starts(1, 0), 16);
}

TEST(DataBatchLoader, EvalBatchesAreTheFirstWindowsInOrder) {
  ScratchDir dir;
  const std::string train = write_stream(dir, "train.h5", 16 * 20 + 1);
  const std::string val = write_stream(dir, "val.h5", 16 * 19 + 5);  // 19 windows: 2 batches of 8
  for (int rank = 0; rank < 2; ++rank) {
    BatchLoader loader(TokenDataset::open(train), config(rank, 2, /*shuffle=*/true), 1000);
    EXPECT_FALSE(loader.has_validation());
    EXPECT_THAT(error_of([&] { loader.eval_batch(0, 0); }), HasSubstr("no validation dataset"));
    loader.set_validation(TokenDataset::open(val));
    ASSERT_EQ(loader.num_eval_batches(), 2);
    for (int64_t b = 0; b < 2; ++b)
      for (int k = 0; k < 2; ++k) {
        // Batch b holds windows [8b, 8b + 8); rank r takes [8b + 4r, +4), micro k rows [.. + 2k, +2).
        const int64_t w = 8 * b + 4 * rank + 2 * k;
        expect_batch_matches(loader.eval_batch(b, k), {16 * w, 16 * (w + 1)}, 16);
      }
    // Training batches are untouched by evaluation (separate buffers).
    HostBatch t = loader.batch(3, 1);
    HostBatch e = loader.eval_batch(1, 1);
    EXPECT_NE(t.inputs.data_ptr(), e.inputs.data_ptr());
    EXPECT_THAT(error_of([&] { loader.eval_batch(2, 0); }),
                AllOf(HasSubstr("validation batch 2"), HasSubstr(val), HasSubstr("only 2 batches")));
  }
}

TEST(DataBatchLoader, BadSetupsAreRefused) {
  ScratchDir dir;
  const std::string train = write_stream(dir, "train.h5", 16 * 20 + 1);
  // The model's vocabulary is smaller than the dataset's.
  EXPECT_THAT(error_of([&] { BatchLoader(TokenDataset::open(train), config(0, 1, false), 512); }),
              AllOf(HasSubstr(train), HasSubstr("vocab_size 1000"), HasSubstr("512")));
  // A validation set smaller than one global batch.
  const std::string small = write_stream(dir, "small_val.h5", 16 * 7 + 1);
  BatchLoader loader(TokenDataset::open(train), config(0, 1, false), 1000);
  EXPECT_THAT(error_of([&] { loader.set_validation(TokenDataset::open(small)); }),
              AllOf(HasSubstr(small), HasSubstr("7 windows"), HasSubstr("fewer than one global batch of 8")));
  // A training set shorter than one window.
  const std::string tiny = write_stream(dir, "tiny.h5", 16);
  EXPECT_THAT(error_of([&] { BatchLoader(TokenDataset::open(tiny), config(0, 1, false), 1000); }),
              HasSubstr("dataset shorter than one window"));
}

TEST(DataBatchLoader, CorruptTokensSurfaceWithFileAndOffset) {
  ScratchDir dir;
  std::vector<uint16_t> toks(16 * 4 + 1, 10);
  toks[40] = 60000;  // outside GPT-2's vocabulary
  const std::string path = dir.file("shard.bin");
  testing::write_bin(path, {.tokens = toks});
  SamplerConfig c{.seq_len = 16, .global_batch = 2, .micro_batch = 1, .dp_rank = 0, .dp_size = 1};
  BatchLoader loader(TokenDataset::open(path), c, 50257);
  loader.batch(0, 0);  // window 0: tokens 0..16
  EXPECT_THAT(error_of([&] { loader.batch(1, 0); }),  // window 2: tokens 32..48
              AllOf(HasSubstr(path), HasSubstr("token id 60000"), HasSubstr("offset 40")));
}

}  // namespace
}  // namespace tetra::data
