// The pipeline's mechanics on the CPU backend: the ring of prefetch + 1 buffers is reused (no
// allocation per step), readers run exactly `prefetch` micro-batches ahead and no further, a batch
// stays intact until the next call, adjacent windows are read with one call, and the consumer only
// waits when the data is truly late.
#include <algorithm>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>

#include <chrono>
#include <set>
#include <thread>

#include "data/loader_pipeline.h"
#include "loader_test_util.h"
#include "runtime/memory.h"

namespace tetra::data::loadertest {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<Corpus> corpus_of(const std::string& path, int64_t T) {
  CorpusOptions co;
  co.train = DataSpec::single(path);
  co.seq_len = T;
  return std::make_shared<Corpus>(co);
}

// Unit u = windows [u·mb, (u+1)·mb) of the one file, in order (wrapping).
UnitPlan sequential_plan(std::shared_ptr<Corpus> corpus, int64_t mb) {
  return [corpus, mb](int64_t unit, RowRef* rows) {
    const WindowSet& w = corpus->train()[0];
    for (int64_t j = 0; j < mb; ++j) rows[j] = w.locate((unit * mb + j) % w.size(), corpus->seq_len());
  };
}

// Waits until the readers have finished `units` reads (an event: the test has no time limit of its
// own; ctest's timeout catches a loader that never gets there).
void wait_filled(const LoaderPipeline& p, int64_t units) {
  while (p.stats().filled < units) std::this_thread::sleep_for(1ms);
}

TEST(LoaderPipeline, ReadersRunExactlyPrefetchUnitsAheadAndNoFurther) {
  ScratchDir dir;
  const int64_t T = 16, mb = 2;
  const TokenFile f = make_file(dir, "p.bin", Kind::Bin, T * 100 + 1, 1);
  auto corpus = corpus_of(f.path, T);
  for (int prefetch : {0, 1, 3, 6}) {
    PipelineOptions o;
    o.micro_batch = mb;
    o.seq_len = T;
    o.threads = 3;
    o.prefetch = prefetch;
    LoaderPipeline p(corpus, sequential_plan(corpus, mb), o);
    EXPECT_EQ(p.ring_slots(), prefetch + 1);
    p.start(0);
    // Units 0..prefetch are read: the one to hand out next and `prefetch` ahead; nothing beyond
    // (the readers then wait for a free slot; a few more milliseconds would show a read too many).
    const int64_t unit_bytes = mb * (T + 1) * 2;
    wait_filled(p, prefetch + 1);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(p.stats().token_bytes, (prefetch + 1) * unit_bytes) << "prefetch " << prefetch;
    p.get(0);  // unit 0 is in use now: still `prefetch` ahead of it
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(p.stats().token_bytes, (prefetch + 1) * unit_bytes) << "prefetch " << prefetch;
    EXPECT_EQ(p.stats().waits, 0) << "prefetch " << prefetch;  // unit 0 was read before get(0)
    // get(1) releases unit 0: one more is read. With prefetch ≥ 1 unit 1 was read ahead and is
    // handed out without waiting; with prefetch 0 it is read only when asked for: get(1) waits.
    p.get(1);
    wait_filled(p, prefetch + 2);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(p.stats().token_bytes, (prefetch + 2) * unit_bytes) << "prefetch " << prefetch;
    EXPECT_EQ(p.stats().waits, prefetch == 0 ? 1 : 0) << "prefetch " << prefetch;
    // What was read ahead (units 2..prefetch + 1, all read by now) is handed out without waiting.
    for (int64_t u = 2; u <= prefetch + 1; ++u) EXPECT_EQ(p.get(u).wait_s, 0.0) << "unit " << u;
    EXPECT_EQ(p.stats().waits, prefetch == 0 ? 1 : 0) << "prefetch " << prefetch;
  }
}

TEST(LoaderPipeline, TheRingIsReusedAndABatchStaysIntactUntilTheNextCall) {
  ScratchDir dir;
  const int64_t T = 8, mb = 3;
  const TokenFile f = make_file(dir, "r.h5", Kind::H5U16, T * 60 + 1, 2);
  auto corpus = corpus_of(f.path, T);
  PipelineOptions o;
  o.micro_batch = mb;
  o.seq_len = T;
  o.threads = 4;
  o.prefetch = 2;
  LoaderPipeline p(corpus, sequential_plan(corpus, mb), o);
  p.start(0);
  std::set<const void*> buffers;
  // Warm up one round of the ring, then measure: later steps allocate no tensor storage at all.
  for (int64_t u = 0; u < 3; ++u) buffers.insert(p.get(u).inputs.data_ptr());
  const size_t live = allocated_bytes(Device::cpu());
  reset_peak_allocated(Device::cpu());
  for (int64_t u = 3; u < 200; ++u) {
    LoaderPipeline::Batch b = p.get(u);
    buffers.insert(b.inputs.data_ptr());
    // Readers keep filling other slots meanwhile; this batch must not change under us.
    std::vector<int32_t> before(b.inputs.data<int32_t>(), b.inputs.data<int32_t>() + mb * T);
    std::this_thread::sleep_for(1ms);
    ASSERT_EQ(std::vector<int32_t>(b.inputs.data<int32_t>(), b.inputs.data<int32_t>() + mb * T), before) << "unit " << u;
    const HostRows h = to_host({b.inputs, b.targets, 0});
    for (int64_t r = 0; r < mb; ++r)
      expect_row(h, r, T, {f}, {0, ((u * mb + r) % 60) * T}, "unit " + std::to_string(u));
  }
  EXPECT_EQ(buffers.size(), 3u);  // prefetch + 1 slots, round and round
  EXPECT_EQ(allocated_bytes(Device::cpu()), live);
  EXPECT_EQ(peak_allocated_bytes(Device::cpu()), live);
}

TEST(LoaderPipeline, AdjacentWindowsAreReadWithOneCall) {
  ScratchDir dir;
  const int64_t T = 8, mb = 4;
  const TokenFile f = make_file(dir, "c.bin", Kind::Bin, T * 40 + 1, 3);
  auto corpus = corpus_of(f.path, T);
  PipelineOptions o;
  o.micro_batch = mb;
  o.seq_len = T;
  LoaderPipeline sequential(corpus, sequential_plan(corpus, mb), o);
  for (int64_t u = 0; u < 10; ++u) sequential.get(u);
  EXPECT_EQ(sequential.stats().reads, 10);  // one run of 4 windows per unit
  EXPECT_EQ(sequential.stats().file_bytes, 10 * (mb * T + 1) * 2);
  // Every other window: nothing to coalesce.
  LoaderPipeline strided(corpus, [corpus](int64_t unit, RowRef* rows) {
    for (int64_t j = 0; j < 4; ++j) rows[j] = corpus->train()[0].locate((unit * 8 + 2 * j) % 40, 8);
  }, o);
  for (int64_t u = 0; u < 10; ++u) strided.get(u);
  EXPECT_EQ(strided.stats().reads, 40);
  // A unit of one run is read as is; the four runs of a strided unit are announced to the kernel
  // (POSIX_FADV_WILLNEED) before they are read.
  EXPECT_TRUE(sequential.read_hints());
  EXPECT_EQ(sequential.stats().hinted, 0);
  EXPECT_EQ(strided.stats().hinted, 40);
}

TEST(LoaderPipeline, ReadHintsGiveWayToALowOpenFileLimitAndNeverChangeTheTokens) {
  ScratchDir dir;
  const int64_t T = 8, mb = 4;
  std::vector<TokenFile> files;
  for (int i = 0; i < 3; ++i)
    files.push_back(make_file(dir, "h" + std::to_string(i) + ".bin", Kind::Bin, T * 40 + 1, 10 + i));
  CorpusOptions co;
  co.train = DataSpec::single(dir.file("h*.bin"));
  co.seq_len = T;
  auto corpus = std::make_shared<Corpus>(co);
  // Unit u: window 7u + 5j (mod 117) of the three shards: scattered, so every window is a run.
  auto plan = [corpus](int64_t unit, RowRef* rows) {
    for (int64_t j = 0; j < 4; ++j) rows[j] = corpus->train()[0].locate((unit * 7 + j * 5) % 117, 8);
  };
  PipelineOptions o;
  o.micro_batch = mb;
  o.seq_len = T;
  o.threads = 2;
  o.prefetch = 2;
  auto read_units = [&](LoaderPipeline& p) {
    std::vector<int32_t> all;
    for (int64_t u = 0; u < 12; ++u) {
      const LoaderPipeline::Batch b = p.get(u);
      all.insert(all.end(), b.inputs.data<int32_t>(), b.inputs.data<int32_t>() + mb * T);
      all.insert(all.end(), b.targets.data<int32_t>(), b.targets.data<int32_t>() + mb * T);
    }
    return all;
  };
  LoaderPipeline hinted(corpus, plan, o);
  ASSERT_TRUE(hinted.read_hints());
  const std::vector<int32_t> with_hints = read_units(hinted);
  // One snapshot: the readers are still reading ahead, and a unit's reads and hints are counted
  // together, so two stats() calls may see different numbers of units.
  const LoaderStats after = hinted.stats();
  EXPECT_GE(after.reads, 12 * mb);  // and the units read ahead
  EXPECT_EQ(after.hinted, after.reads);
  // The tokens are the files' own.
  for (int64_t u = 0; u < 12; ++u)
    for (int64_t j = 0; j < mb; ++j) {
      const RowRef w = corpus->train()[0].locate((u * 7 + j * 5) % 117, T);
      const std::vector<int32_t> want = direct_read(files[static_cast<size_t>(w.shard)].path, w.offset, T + 1);
      const int32_t* in = with_hints.data() + u * 2 * mb * T + j * T;
      ASSERT_EQ(std::vector<int32_t>(in, in + T), std::vector<int32_t>(want.begin(), want.end() - 1)) << u << " " << j;
      ASSERT_EQ(std::vector<int32_t>(in + mb * T, in + mb * T + T), std::vector<int32_t>(want.begin() + 1, want.end()))
          << u << " " << j;
    }
  // A soft open-file limit with less than 256 descriptors to spare: no hint descriptors, the same tokens.
  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  int open_now = 0;
  for (int fd = 0; fd < 4096; ++fd) open_now += ::fcntl(fd, F_GETFD) != -1;
  struct rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(open_now + 100);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  {
    LoaderPipeline plain(corpus, plan, o);
    EXPECT_FALSE(plain.read_hints());
    EXPECT_EQ(read_units(plain), with_hints);
    EXPECT_EQ(plain.stats().hinted, 0);
  }
  setrlimit(RLIMIT_NOFILE, &saved);
}

TEST(LoaderPipeline, TheConsumerWaitsOnlyWhenTheDataIsLate) {
  ScratchDir dir;
  const int64_t T = 8, mb = 2;
  const TokenFile f = make_file(dir, "w.bin", Kind::Bin, T * 50 + 1, 4);
  auto corpus = corpus_of(f.path, T);
  PipelineOptions o;
  o.micro_batch = mb;
  o.seq_len = T;
  o.prefetch = 4;
  o.threads = 2;
  // A plan that takes 20 ms per unit (a slow disk): a consumer faster than that must wait, one
  // slower than that never does.
  auto slow_plan = [corpus, mb](int64_t unit, RowRef* rows) {
    std::this_thread::sleep_for(20ms);
    sequential_plan(corpus, mb)(unit, rows);
  };
  LoaderPipeline fast_consumer(corpus, slow_plan, o);
  fast_consumer.start(0);
  double waited = 0;
  for (int64_t u = 0; u < 12; ++u) waited += fast_consumer.get(u).wait_s;
  EXPECT_GT(fast_consumer.stats().waits, 0);
  EXPECT_GT(waited, 0.0);
  EXPECT_NEAR(fast_consumer.stats().wait_s, waited, 1e-9);

  // A consumer slower than the reads: each step lasts until every unit the readers may claim has
  // been read (an event, not a duration; reads finish out of order, so all of them), so no get()
  // waits. Before get(u) the units below u − 1 are released: u − 1 + ring units may be claimed.
  LoaderPipeline slow_consumer(corpus, slow_plan, o);
  slow_consumer.start(0);
  const int64_t ring = slow_consumer.ring_slots();
  for (int64_t u = 0; u < 12; ++u) {
    wait_filled(slow_consumer, std::max(u - 1, int64_t{0}) + ring);
    EXPECT_EQ(slow_consumer.get(u).wait_s, 0.0) << "unit " << u;
  }
  EXPECT_EQ(slow_consumer.stats().waits, 0);
}

}  // namespace
}  // namespace tetra::data::loadertest
