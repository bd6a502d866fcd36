// NCCL collectives across ranks (ctest runs this under mpirun -np 2): every collective of the
// Communicator interface on integer-valued data, so results must be exact, in fp32, bf16 and int32;
// the Work/stream contract on a separate communication stream; split; barrier; host reductions.
// Exits 0 with a message ("SKIPPED") unless every rank has a GPU of its own.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <memory>

#include "runtime/mpi_communicator.h"
#include "runtime/nccl_communicator.h"
#include "tests/runtime/cuda/gpu_test_util.h"
#include "tests/runtime/cuda/mpi_gpu_test_main.h"

namespace tetra::gputest {
namespace {

std::shared_ptr<Communicator> g_mpi;
std::unique_ptr<Communicator> g_nccl;            // no host communicator: host values go through the GPU
std::unique_ptr<Communicator> g_nccl_with_host;  // all_reduce_host delegated to MPI

int R() { return g_nccl->rank(); }
int S() { return g_nccl->size(); }

// Values are small integers: exact in fp32, bf16 (|v| ≤ 256) and int32.
Tensor upload_values(const std::vector<double>& v, DType dt) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (dt == DType::I32) {
    Tensor h = Tensor::empty({n}, DType::I32);
    for (int64_t i = 0; i < n; ++i) h.data<int32_t>()[i] = static_cast<int32_t>(v[static_cast<size_t>(i)]);
    return upload_raw(h);
  }
  Tensor h = Tensor::empty({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) h.data<float>()[i] = static_cast<float>(v[static_cast<size_t>(i)]);
  return upload(h, dt);
}

std::vector<double> download_values(const Tensor& dev) {
  if (dev.dtype() != DType::I32) return download(dev);
  Tensor h = download_raw(dev);
  std::vector<double> v(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = h.data<int32_t>()[i];
  return v;
}

Tensor poisoned_values(int64_t n, DType dt) {
  Tensor t = Tensor::empty({n}, dt, gpu());
  poison(t);
  return t;
}

const DType kTypes[] = {DType::F32, DType::BF16, DType::I32};

TEST(Nccl, AllReduceEveryOp) {
  const int64_t n = 1001;
  const double ranks_sum = S() * (S() + 1) / 2.0;  // Σ_r (r + 1)
  for (DType dt : kTypes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg}) {
      if (op == ReduceOp::Avg && (dt == DType::I32 || (S() & (S() - 1)) != 0))
        continue;  // integer averages truncate; 1/S is inexact unless S is a power of two
      std::vector<double> mine(n), want(n);
      for (int64_t i = 0; i < n; ++i) {
        const double k = static_cast<double>(i % 7 + 1);
        mine[i] = (R() + 1) * k;
        want[i] = op == ReduceOp::Sum ? ranks_sum * k
                  : op == ReduceOp::Max ? S() * k
                  : op == ReduceOp::Min ? k
                                        : ranks_sum * k / S();
      }
      Tensor t = upload_values(mine, dt);
      g_nccl->all_reduce(t, op)->wait();
      EXPECT_EQ(download_values(t), want) << dtype_name(dt) << " op " << static_cast<int>(op);
    }
  }
}

TEST(Nccl, ReduceScatter) {
  const int64_t n = 333;
  const double ranks_sum = S() * (S() + 1) / 2.0;
  for (DType dt : kTypes) {
    std::vector<double> in(static_cast<size_t>(S() * n)), want(n);
    for (int j = 0; j < S(); ++j)
      for (int64_t i = 0; i < n; ++i) in[j * n + i] = (R() + 1) * (j + 1 + i % 5);
    for (int64_t i = 0; i < n; ++i) want[i] = ranks_sum * (R() + 1 + i % 5);
    Tensor tin = upload_values(in, dt);
    Tensor out = poisoned_values(n, dt);
    g_nccl->reduce_scatter(out, tin, ReduceOp::Sum)->wait();
    EXPECT_EQ(download_values(out), want) << dtype_name(dt);
  }
}

TEST(Nccl, AllGather) {
  const int64_t n = 257;
  for (DType dt : kTypes) {
    std::vector<double> in(n), want(static_cast<size_t>(S() * n));
    for (int64_t i = 0; i < n; ++i) in[i] = R() * 50 + i % 50;
    for (int r = 0; r < S(); ++r)
      for (int64_t i = 0; i < n; ++i) want[r * n + i] = r * 50 + i % 50;
    Tensor tin = upload_values(in, dt);
    Tensor out = poisoned_values(S() * n, dt);
    g_nccl->all_gather(out, tin)->wait();
    EXPECT_EQ(download_values(out), want) << dtype_name(dt);
  }
}

TEST(Nccl, AllToAll) {
  const int64_t c = 129;  // elements per peer
  std::vector<double> in(static_cast<size_t>(S() * c)), want(static_cast<size_t>(S() * c));
  for (int j = 0; j < S(); ++j)
    for (int64_t i = 0; i < c; ++i) {
      in[j * c + i] = R() * 1000 + j * 10 + i % 10;    // chunk j goes to rank j
      want[j * c + i] = j * 1000 + R() * 10 + i % 10;  // chunk j came from rank j
    }
  Tensor tin = upload_values(in, DType::F32);
  Tensor out = poisoned_values(S() * c, DType::F32);
  g_nccl->all_to_all(out, tin)->wait();
  EXPECT_EQ(download_values(out), want);
}

TEST(Nccl, AllToAllV) {
  std::vector<int64_t> send(S()), recv(S());
  for (int j = 0; j < S(); ++j) {
    send[j] = 1 + R() + 2 * j;  // rank j computes the same number as its recv[R]
    recv[j] = 1 + j + 2 * R();
  }
  std::vector<double> in, want;
  for (int j = 0; j < S(); ++j)
    for (int64_t i = 0; i < send[j]; ++i) in.push_back(R() * 1000 + j * 100 + i);
  for (int j = 0; j < S(); ++j)
    for (int64_t i = 0; i < recv[j]; ++i) want.push_back(j * 1000 + R() * 100 + i);
  Tensor tin = upload_values(in, DType::F32);
  Tensor out = poisoned_values(static_cast<int64_t>(want.size()), DType::F32);
  g_nccl->all_to_all_v(out, recv, tin, send)->wait();
  EXPECT_EQ(download_values(out), want);
}

TEST(Nccl, Broadcast) {
  const int root = S() - 1;
  for (DType dt : kTypes) {
    std::vector<double> want(513);
    for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<double>((i * 7) % 200) - 100;
    Tensor t = R() == root ? upload_values(want, dt) : poisoned_values(513, dt);
    g_nccl->broadcast(t, root)->wait();
    EXPECT_EQ(download_values(t), want) << dtype_name(dt);
  }
}

TEST(Nccl, SendRecvPairs) {
  // Even ranks send to the next rank, then receive from it; odd ranks the reverse (no deadlock).
  const int peer = R() % 2 == 0 ? R() + 1 : R() - 1;
  if (peer >= S()) GTEST_SKIP() << "odd rank count: the last rank has no partner";
  const int64_t n = 4099;
  std::vector<double> mine(n), theirs(n);
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = R() * 7 + i % 100;
    theirs[i] = peer * 7 + i % 100;
  }
  Tensor out = upload_values(mine, DType::F32);
  Tensor in = poisoned_values(n, DType::F32);
  if (R() % 2 == 0) {
    g_nccl->send(out, peer)->wait();
    g_nccl->recv(in, peer)->wait();
  } else {
    g_nccl->recv(in, peer)->wait();
    g_nccl->send(out, peer)->wait();
  }
  EXPECT_EQ(download_values(in), theirs);
}

// A ring step in one batch (every rank sends to r+1 and receives from r−1 at once: unbatched, the
// sends would wait for receives that are queued behind them), plus a send to itself and an empty
// send that is skipped.
TEST(Nccl, BatchedSendRecvRingStep) {
  const int64_t n = 4099;
  for (DType dt : kTypes) {
    std::vector<double> mine(n), theirs(n);
    const int from = (R() + S() - 1) % S();
    for (int64_t i = 0; i < n; ++i) {
      mine[i] = (R() + 1) * (i % 5 + 1);
      theirs[i] = (from + 1) * (i % 5 + 1);
    }
    Tensor out = upload_values(mine, dt), in = poisoned_values(n, dt), self = poisoned_values(n, dt);
    Tensor empty = Tensor::empty({0}, dt, gpu());
    g_nccl
        ->batch_send_recv({P2PTransfer::send(out, (R() + 1) % S()), P2PTransfer::recv(in, from),
                           P2PTransfer::send(out, R()), P2PTransfer::recv(self, R()), P2PTransfer::send(empty, from)})
        ->wait();
    EXPECT_EQ(download_values(in), theirs) << dtype_name(dt);
    EXPECT_EQ(download_values(self), mine) << dtype_name(dt);
  }
}

// The collective runs on its own stream after the compute stream's pending work, and Work::wait()
// orders later compute after it.
TEST(Nccl, SeparateCommunicationStream) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(g_nccl.get());
  ASSERT_NE(nccl, nullptr);
  Stream comm_stream = Stream::create(gpu());
  nccl->set_stream(comm_stream);
  const int64_t n = 1 << 20;
  Tensor t = Tensor::empty({n}, DType::F32, gpu());
  ops::fill(t, static_cast<float>(R() + 1));  // on the compute stream, not yet synchronised
  auto work = nccl->all_reduce(t, ReduceOp::Sum);
  work->wait();
  ops::scale(t, 2.0f);  // compute stream, after the collective
  const double want = 2.0 * S() * (S() + 1) / 2.0;
  for (double v : download_values(t)) ASSERT_EQ(v, want);
  int spins = 0;
  while (!work->is_completed() && spins < 1000000) ++spins;
  EXPECT_TRUE(work->is_completed());
  nccl->set_stream(Stream());
}

TEST(Nccl, BarrierAndHostReductions) {
  g_nccl->barrier();
  g_nccl_with_host->barrier();
  for (Communicator* c : {g_nccl.get(), g_nccl_with_host.get()}) {
    std::vector<double> v{static_cast<double>(R() + 1), 0.25 * R()};
    c->all_reduce_host(v, ReduceOp::Sum);
    EXPECT_EQ(v[0], S() * (S() + 1) / 2.0);
    EXPECT_EQ(v[1], 0.25 * S() * (S() - 1) / 2.0);
    EXPECT_EQ(c->all_reduce_scalar(static_cast<double>(R()), ReduceOp::Max), S() - 1.0);
  }
}

TEST(Nccl, Split) {
  // Ranks of equal parity form a group, ordered by descending world rank (key = -rank).
  for (Communicator* parent : {g_nccl.get(), g_nccl_with_host.get()}) {
    std::unique_ptr<Communicator> sub = parent->split(R() % 2, -R());
    ASSERT_NE(sub, nullptr);
    int members = 0, below = 0;
    for (int r = 0; r < S(); ++r)
      if (r % 2 == R() % 2) {
        ++members;
        if (r > R()) ++below;  // higher world ranks come first
      }
    EXPECT_EQ(sub->size(), members);
    EXPECT_EQ(sub->rank(), below);
    EXPECT_EQ(sub->backend(), "nccl");
    double want = 0;
    for (int r = 0; r < S(); ++r)
      if (r % 2 == R() % 2) want += r + 1;
    Tensor t = upload_values(std::vector<double>(64, R() + 1), DType::F32);
    sub->all_reduce(t, ReduceOp::Sum)->wait();
    EXPECT_EQ(download_values(t), std::vector<double>(64, want));
    std::vector<double> hv{1.0};
    sub->all_reduce_host(hv, ReduceOp::Sum);
    EXPECT_EQ(hv[0], members);
  }
}

TEST(Nccl, RejectsMismatchedArguments) {
  Tensor a = Tensor::empty({10}, DType::F32, gpu());
  Tensor b = Tensor::empty({10 * S() + 1}, DType::F32, gpu());
  EXPECT_THROW(g_nccl->all_gather(b, a), Error);
  Tensor host = Tensor::empty({10}, DType::F32);
  EXPECT_THROW(g_nccl->all_reduce(host, ReduceOp::Sum), Error);
  Tensor u16 = Tensor::empty({10}, DType::U16, gpu());
  EXPECT_THROW(g_nccl->all_reduce(u16, ReduceOp::Sum), Error);
}

}  // namespace
}  // namespace tetra::gputest

int main(int argc, char** argv) {
  using namespace tetra;
  using namespace tetra::gputest;
  return run_mpi_gpu_tests(
      argc, argv, "the NCCL tests", {},
      [] {
        g_mpi = std::shared_ptr<Communicator>(MpiCommunicator::world().release());
        g_mpi->set_timeout(120);
        g_nccl = make_nccl_communicator(MPI_COMM_WORLD, gpu(), nullptr);
        g_nccl->set_timeout(120);
        g_nccl_with_host = make_nccl_communicator(MPI_COMM_WORLD, gpu(), g_mpi);
      },
      [] {
        g_nccl.reset();
        g_nccl_with_host.reset();
        g_mpi.reset();
      });
}
