// The copy-engine all-reduce (PeerCopyCommunicator) across ranks (ctest runs this under mpirun -np
// 2): sums of slices of the registered buffer, bf16 and fp32, against the CPU twin of the owner's
// sum (bit-identical); slices at unaligned offsets, shorter than a chunk, several in a row on a
// communication stream without host synchronisation, and replayed from a CUDA graph with new data;
// everything else, and ranges past the flag slots, goes to NCCL. Exits 0 with "SKIPPED" unless every rank has a GPU of its own.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <memory>

#include "runtime/cuda/device_context.h"
#include "runtime/cuda/peer_sum.h"
#include "runtime/cuda_graph.h"
#include "runtime/mpi_communicator.h"
#include "runtime/nccl_communicator.h"
#include "runtime/ops.h"
#include "runtime/peer_copy_communicator.h"
#include "runtime/stream.h"
#include "tests/runtime/cuda/gpu_test_util.h"
#include "tests/runtime/cuda/mpi_gpu_test_main.h"

namespace tetra::gputest {
namespace {

std::shared_ptr<Communicator> g_mpi;
std::unique_ptr<Communicator> g_nccl;

// Rank r's values for round `round`: every rank can compute every rank's.
std::vector<float> values_of(int r, int round, int64_t n, DType dt) {
  Rng rng(static_cast<uint64_t>(1000 * round + r + 1));
  Tensor h = representable(random_host(rng, {n}), dt);
  return std::vector<float>(h.data<float>(), h.data<float>() + n);
}

struct Range {
  int64_t begin, count;
};

// What the buffer must hold after all-reducing `ranges` of every rank's values of `round`.
std::vector<float> expected(int me, int size, int round, int64_t n, DType dt, const std::vector<Range>& ranges) {
  std::vector<std::vector<float>> all;
  for (int r = 0; r < size; ++r) all.push_back(values_of(r, round, n, dt));
  std::vector<float> want = all[static_cast<size_t>(me)];
  const std::vector<float> sum = cuda::peer_sum_reference(all, dt);
  for (const Range& g : ranges)
    for (int64_t i = g.begin; i < g.begin + g.count; ++i) want[static_cast<size_t>(i)] = sum[static_cast<size_t>(i)];
  return want;
}

void fill(Tensor& buffer, const std::vector<float>& v) {
  Tensor h = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  ops::copy(buffer, upload(h, buffer.dtype()));
}

int64_t mismatches(const Tensor& buffer, const std::vector<float>& want) {
  const std::vector<double> got = download(buffer);
  int64_t wrong = 0;
  for (size_t i = 0; i < want.size(); ++i) wrong += got[i] != static_cast<double>(want[i]);
  return wrong;
}

TEST(PeerCopy, SlicesOfTheBufferSumBitExactly) {
  const int64_t n = (1 << 20) + 77;
  const std::vector<Range> ranges = {{0, 8 * 1000}, {8 * 1000, 1}, {8 * 1000 + 7, 1001}, {20000, 5},
                                     {30000, n - 30000}};
  for (DType dt : {DType::BF16, DType::F32}) {
    PeerCopyCommunicator pc(*g_nccl, *g_mpi, gpu(), n, dt);
    for (int round = 0; round < 3; ++round) {
      fill(pc.buffer(), values_of(pc.rank(), round, n, dt));
      // On a communication stream, one after another, the host never waiting in between.
      Stream comm = Stream::create(gpu());
      Event ready(gpu());
      ready.record();
      ready.block(comm);
      {
        StreamGuard on_comm(comm);
        for (const Range& g : ranges) {
          Tensor slice = pc.buffer().slice_flat(g.begin, {g.count});
          pc.all_reduce(slice)->wait();
        }
      }
      Event done(gpu());
      done.record(comm);
      done.block(current_stream(gpu()));
      EXPECT_EQ(mismatches(pc.buffer(), expected(pc.rank(), pc.size(), round, n, dt, ranges)), 0)
          << dtype_name(dt) << " round " << round;
    }
    EXPECT_EQ(pc.copy_engine_all_reduces(), 3 * static_cast<int64_t>(ranges.size()));
  }
}

TEST(PeerCopy, ReplaysFromACudaGraph) {
  const int64_t n = 3 * 8192 + 40;
  const std::vector<Range> ranges = {{0, 8192}, {8192, n - 8192}};
  PeerCopyCommunicator pc(*g_nccl, *g_mpi, gpu(), n, DType::BF16);
  // The first round eagerly; then capture one round and replay it with new values each time.
  CudaGraph graph(gpu());
  for (int round = 0; round < 4; ++round) {
    fill(pc.buffer(), values_of(pc.rank(), round, n, DType::BF16));
    if (round == 0 || round == 1) {
      if (round == 1) graph.begin_capture();
      for (const Range& g : ranges) {
        Tensor slice = pc.buffer().slice_flat(g.begin, {g.count});
        pc.all_reduce(slice)->wait();
      }
      if (round == 1) {
        graph.end_capture();
        graph.replay();
      }
    } else {
      graph.replay();
    }
    EXPECT_EQ(mismatches(pc.buffer(), expected(pc.rank(), pc.size(), round, n, DType::BF16, ranges)), 0)
        << "round " << round;
  }
}

TEST(PeerCopy, EverythingElseGoesToNccl) {
  PeerCopyCommunicator pc(*g_nccl, *g_mpi, gpu(), 4096, DType::BF16);
  // A tensor outside the buffer, and another op on a slice of it.
  Tensor other = upload(Tensor::from_vector(std::vector<float>(100, static_cast<float>(pc.rank() + 1)), {100}),
                        DType::BF16);
  pc.all_reduce(other)->wait();
  const double ranks_sum = pc.size() * (pc.size() + 1) / 2.0;
  EXPECT_EQ(download(other), std::vector<double>(100, ranks_sum));
  fill(pc.buffer(), std::vector<float>(4096, static_cast<float>(pc.rank() + 1)));
  Tensor slice = pc.buffer().slice_flat(0, {64});
  pc.all_reduce(slice, ReduceOp::Max)->wait();
  EXPECT_EQ(download(slice), std::vector<double>(64, static_cast<double>(pc.size())));
  EXPECT_EQ(pc.copy_engine_all_reduces(), 0);
}

// Each distinct range has its own flags; past the 1024th, ranges go to NCCL (every rank sees the
// same ranges in the same order, so all ranks switch together). Single elements: one rank's chunk
// is empty.
TEST(PeerCopy, RangesPastTheFlagSlotsGoToNccl) {
  const int64_t n = 2048;
  PeerCopyCommunicator pc(*g_nccl, *g_mpi, gpu(), n, DType::F32);
  std::vector<Range> ranges;
  for (int64_t i = 0; i < 1030; ++i) ranges.push_back({i, 1});
  fill(pc.buffer(), values_of(pc.rank(), 0, n, DType::F32));
  for (const Range& g : ranges) {
    Tensor slice = pc.buffer().slice_flat(g.begin, {g.count});
    pc.all_reduce(slice)->wait();
  }
  EXPECT_EQ(mismatches(pc.buffer(), expected(pc.rank(), pc.size(), 0, n, DType::F32, ranges)), 0);
  EXPECT_EQ(pc.copy_engine_all_reduces(), 1024);
}

TEST(PeerCopy, RefusesWhatItCannotRegister) {
  EXPECT_THROW(PeerCopyCommunicator(*g_nccl, *g_mpi, gpu(), 16, DType::I32), Error);
  EXPECT_THROW(PeerCopyCommunicator(*g_nccl, *g_mpi, gpu(), 0, DType::BF16), Error);
  EXPECT_EQ(PeerCopyCommunicator::unsupported_reason(*g_mpi, gpu()), "");
  EXPECT_NE(PeerCopyCommunicator::unsupported_reason(*g_mpi, Device::cpu()), "");
}

}  // namespace
}  // namespace tetra::gputest

int main(int argc, char** argv) {
  using namespace tetra;
  using namespace tetra::gputest;
  return run_mpi_gpu_tests(
      argc, argv, "the copy-engine tests", {.one_host = true},
      [] {
        g_mpi = std::shared_ptr<Communicator>(MpiCommunicator::world().release());
        g_mpi->set_timeout(120);
        g_nccl = make_nccl_communicator(MPI_COMM_WORLD, gpu(), g_mpi);
        g_nccl->set_timeout(120);
      },
      [] {
        g_nccl.reset();
        g_mpi.reset();
      });
}
