// The tensor-parallel communication primitives (parallel/tensor/linear.h, tp_all_gather.h,
// tp_reduce_scatter.h) on CPU ranks under mpirun: the group is the whole world (tp = 2, 3 or 4
// ranks), every shape odd (M = 7 rows per shard, I/tp = 5, O/tp = 3). Each primitive, forward and
// backward, with and without overlap, against the single-rank computation of the same math done on
// every rank from the full tensors (norm-wise ≤ 1e-6 relative, fp32), and the overlapped and plain
// paths against each other bit for bit. Also the per-axis exposure bookkeeping of the
// CommScheduler and the batched point-to-point of the MPI communicator.
//
// usage: mpirun -np TP tp_primitives_test
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "parallel/comm_scheduler.h"
#include "parallel/tensor/all_gather.h"
#include "parallel/tensor/linear.h"
#include "parallel/tensor/reduce_scatter.h"
#include "runtime/mpi_communicator.h"
#include "tests/parallel/tensor/tp_problem.h"

namespace tetra::test {
namespace {

std::unique_ptr<MpiCommunicator> g_world;
int R() { return g_world->rank(); }
int S() { return g_world->size(); }

constexpr double kTol = 1e-6;
constexpr int64_t kM = 7;

TpProblem problem(uint64_t seed) { return TpProblem(S(), kM, 5 * S(), 3 * S(), seed); }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// Runs `body(group)` once without and once with overlap, each on a fresh step of a scheduler, and
// returns what each run produced.
template <class F>
std::pair<std::vector<Tensor>, std::vector<Tensor>> both_paths(F body) {
  std::vector<Tensor> out[2];
  for (int overlap = 0; overlap < 2; ++overlap) {
    CommScheduler sched(Device::cpu());
    sched.begin_step();
    TpGroup g(*g_world, sched, overlap == 1);
    out[overlap] = body(g);
    sched.end_step();
    for (const CommScheduler::Record& rec : sched.records()) {
      EXPECT_EQ(rec.axis, MeshAxis::TP) << rec.name;
      EXPECT_EQ(rec.name.rfind("tp ", 0), 0u) << rec.name;
    }
    // The ring and the direct exchanges are tp−1 steps each; the plain paths one collective.
    EXPECT_FALSE(sched.records().empty());
    double waited = 0;
    for (const CommScheduler::Record& rec : sched.records()) waited += rec.waited_ms;
    EXPECT_DOUBLE_EQ(sched.exposed_ms(MeshAxis::TP), waited);
    EXPECT_DOUBLE_EQ(sched.exposed_ms(MeshAxis::DP), 0.0);
  }
  EXPECT_EQ(out[0].size(), out[1].size());
  for (size_t i = 0; i < out[0].size() && i < out[1].size(); ++i)
    EXPECT_TRUE(same_bits(out[0][i], out[1][i])) << "output " << i << ": overlapped and plain paths differ";
  return {out[0], out[1]};
}

void expect_close(const Tensor& got, const Tensor& ref, const char* what) {
  EXPECT_LE(rel_error(got, ref), kTol) << what << " on rank " << R();
}

TEST(TpPrimitives, AllGatherLinearForward) {
  for (ops::Activation act : {ops::Activation::None, ops::Activation::Gelu}) {
    const TpProblem p = problem(11);
    Tensor ref = Tensor::empty({p.n, p.out}, DType::F32), ref_pre = Tensor::empty({p.n, p.out}, DType::F32);
    ops::linear_forward(ref, p.x, p.w, p.b, act, act == ops::Activation::Gelu ? &ref_pre : nullptr);
    const Tensor x_shard = p.x_shard(R()), w = p.w_rows(R()), b = p.b_rows(R());
    auto [plain, overlapped] = both_paths([&](TpGroup& g) {
      Tensor y = poisoned({p.n, p.out_slice()}), pre = poisoned({p.n, p.out_slice()}), xg = poisoned({p.n, p.in});
      tp::all_gather_linear_forward(g, y, x_shard, w, b, act, act == ops::Activation::Gelu ? &pre : nullptr, &xg);
      return std::vector<Tensor>{y, pre, xg};
    });
    for (const auto& out : {plain, overlapped}) {
      expect_close(out[0], columns(ref, R() * p.out_slice(), p.out_slice()), "y");
      if (act == ops::Activation::Gelu)
        expect_close(out[1], columns(ref_pre, R() * p.out_slice(), p.out_slice()), "pre_act");
      EXPECT_TRUE(same_bits(out[2], p.x)) << "x_gathered is not the full input";
    }
  }
}

TEST(TpPrimitives, AllGatherLinearForwardWithoutKeepingTheGather) {
  const TpProblem p = problem(12);
  Tensor ref = Tensor::empty({p.n, p.out}, DType::F32);
  ops::linear_forward(ref, p.x, p.w, p.b);
  const Tensor x_shard = p.x_shard(R()), w = p.w_rows(R()), b = p.b_rows(R());
  auto [plain, overlapped] = both_paths([&](TpGroup& g) {
    Tensor y = poisoned({p.n, p.out_slice()});
    tp::all_gather_linear_forward(g, y, x_shard, w, b);
    return std::vector<Tensor>{y};
  });
  expect_close(overlapped[0], columns(ref, R() * p.out_slice(), p.out_slice()), "y");
}

TEST(TpPrimitives, LinearForwardReduceScatter) {
  const TpProblem p = problem(21);
  Tensor ref = Tensor::empty({p.n, p.out}, DType::F32);
  ops::linear_forward(ref, p.x, p.w, p.b, ops::Activation::None, nullptr, &p.residual);
  Tensor ref_nores = Tensor::empty({p.n, p.out}, DType::F32);
  ops::linear_forward(ref_nores, p.x, p.w, Tensor());
  const Tensor x = p.x_cols(R()), w = p.w_cols(R()), res = p.residual_shard(R());
  auto [plain, overlapped] = both_paths([&](TpGroup& g) {
    Tensor y = poisoned({p.m, p.out});
    tp::linear_forward_reduce_scatter(g, y, x, w, p.b, &res);
    Tensor in_place = clone(res);  // the residual stream updated in place
    tp::linear_forward_reduce_scatter(g, in_place, x, w, p.b, &in_place);
    Tensor bare = poisoned({p.m, p.out});
    tp::linear_forward_reduce_scatter(g, bare, x, w, Tensor());
    return std::vector<Tensor>{y, in_place, bare};
  });
  for (const auto& out : {plain, overlapped}) {
    expect_close(out[0], rows(ref, R() * p.m, p.m), "y_shard");
    EXPECT_TRUE(same_bits(out[0], out[1])) << "in place differs";
    expect_close(out[2], rows(ref_nores, R() * p.m, p.m), "y_shard without bias and residual");
  }
}

TEST(TpPrimitives, LinearBackwardInputReduceScatterOverlapsTheWeightGradient) {
  const TpProblem p = problem(31);
  Tensor ref = Tensor::empty({p.n, p.in}, DType::F32), ref_dw = Tensor::empty({p.out, p.in}, DType::F32);
  ops::linear_backward_input(ref, p.dy, p.w);
  ops::linear_backward_weight(ref_dw, nullptr, p.dy, p.x, false);
  const Tensor dy = p.dy_cols(R()), w = p.w_rows(R());
  auto [plain, overlapped] = both_paths([&](TpGroup& g) {
    Tensor dx = poisoned({p.m, p.in}), dw = poisoned({p.out_slice(), p.in});
    int calls = 0;
    tp::linear_backward_input_reduce_scatter(g, dx, dy, w, [&] {
      ++calls;
      ops::linear_backward_weight(dw, nullptr, dy, p.x, false);
    });
    EXPECT_EQ(calls, 1);
    return std::vector<Tensor>{dx, dw};
  });
  for (const auto& out : {plain, overlapped}) {
    expect_close(out[0], rows(ref, R() * p.m, p.m), "dx_shard");
    expect_close(out[1], rows(ref_dw, R() * p.out_slice(), p.out_slice()), "dw");
  }
}

TEST(TpPrimitives, AllGatherLinearBackwardInput) {
  const TpProblem p = problem(41);
  Tensor ref = Tensor::empty({p.n, p.in}, DType::F32), ref_gelu = Tensor::empty({p.n, p.in}, DType::F32);
  ops::linear_backward_input(ref, p.dy, p.w);
  ops::linear_backward_input_gelu(ref_gelu, p.dy, p.w, p.gelu_pre);
  const Tensor dy = p.dy_shard(R()), w = p.w_cols(R()), pre = p.gelu_pre_cols(R());
  auto [plain, overlapped] = both_paths([&](TpGroup& g) {
    Tensor dx = poisoned({p.n, p.in_slice()}), dxg = poisoned({p.n, p.in_slice()}), dyg = poisoned({p.n, p.out});
    tp::all_gather_linear_backward_input(g, dx, dy, w, nullptr, &dyg);
    tp::all_gather_linear_backward_input(g, dxg, dy, w, &pre);
    return std::vector<Tensor>{dx, dxg, dyg};
  });
  for (const auto& out : {plain, overlapped}) {
    expect_close(out[0], columns(ref, R() * p.in_slice(), p.in_slice()), "dx");
    expect_close(out[1], columns(ref_gelu, R() * p.in_slice(), p.in_slice()), "dx through GELU");
    EXPECT_TRUE(same_bits(out[2], p.dy)) << "dy_gathered is not the full gradient";
  }
  // The row-parallel weight gradient from the gathered dy is the full one's column slice.
  Tensor dw = poisoned({p.out, p.in_slice()}), ref_dw = Tensor::empty({p.out, p.in}, DType::F32);
  ops::linear_backward_weight(dw, nullptr, overlapped[2], p.x_cols(R()), false);
  ops::linear_backward_weight(ref_dw, nullptr, p.dy, p.x, false);
  expect_close(dw, columns(ref_dw, R() * p.in_slice(), p.in_slice()), "dw from the gathered dy");
}

TEST(TpPrimitives, LinearForwardAllReduce) {
  const TpProblem p = problem(51);
  Tensor ref = Tensor::empty({p.n, p.out}, DType::F32);
  ops::linear_forward(ref, p.x, p.w, p.b, ops::Activation::None, nullptr, &p.residual);
  const Tensor x = p.x_cols(R()), w = p.w_cols(R());
  auto [plain, overlapped] = both_paths([&](TpGroup& g) {
    Tensor y = poisoned({p.n, p.out});
    tp::linear_forward_all_reduce(g, y, x, w, p.b, &p.residual);
    Tensor in_place = clone(p.residual);
    tp::linear_forward_all_reduce(g, in_place, x, w, p.b, &in_place);
    return std::vector<Tensor>{y, in_place};
  });
  expect_close(overlapped[0], ref, "y");
  EXPECT_TRUE(same_bits(overlapped[0], overlapped[1])) << "in place differs";
  // Every rank holds the same bits.
  Tensor rank0 = clone(overlapped[0]);
  g_world->broadcast(rank0, 0)->wait();
  EXPECT_TRUE(same_bits(rank0, overlapped[0])) << "ranks disagree";
}

TEST(TpPrimitives, LinearBackwardInputAllReduce) {
  const TpProblem p = problem(61);
  Tensor ref = Tensor::empty({p.n, p.in}, DType::F32);
  ops::linear_backward_input(ref, p.dy, p.w);
  const Tensor dy = p.dy_cols(R()), w = p.w_rows(R());
  auto [plain, overlapped] = both_paths([&](TpGroup& g) {
    Tensor dx = poisoned({p.n, p.in});
    int calls = 0;
    tp::linear_backward_input_all_reduce(g, dx, dy, w, [&] { ++calls; });
    EXPECT_EQ(calls, 1);
    return std::vector<Tensor>{dx};
  });
  expect_close(plain[0], ref, "dx");
}

TEST(TpPrimitives, RowCollectivesAlone) {
  const TpProblem p = problem(71);
  auto [plain, overlapped] = both_paths([&](TpGroup& g) {
    Tensor gathered = poisoned({p.n, p.in});
    tp::all_gather_rows(g, gathered, p.x_shard(R()));
    Tensor async = poisoned({p.n, p.in});
    const Tensor shard = p.x_shard(R());
    tp::PendingAllGather pending = tp::PendingAllGather::start(g, async, shard);
    EXPECT_TRUE(pending.pending());
    pending.wait();
    EXPECT_FALSE(pending.pending());
    // Each rank contributes (rank + 1) · dy; the sum is tp(tp+1)/2 · dy.
    Tensor mine = clone(p.dy);
    ops::scale(mine, static_cast<float>(R() + 1));
    Tensor scattered = poisoned({p.m, p.out});
    const Tensor res = p.residual_shard(R());
    tp::reduce_scatter_rows(g, scattered, mine, &res);
    Tensor reduced = clone(mine);
    tp::all_reduce_rows(g, reduced);
    return std::vector<Tensor>{gathered, async, scattered, reduced};
  });
  EXPECT_TRUE(same_bits(overlapped[0], p.x));
  EXPECT_TRUE(same_bits(overlapped[1], p.x));
  const float k = static_cast<float>(S() * (S() + 1) / 2);
  Tensor want = clone(p.dy);
  ops::scale(want, k);
  Tensor want_shard = rows(want, R() * p.m, p.m);
  ops::add(want_shard, want_shard, p.residual_shard(R()));
  expect_close(overlapped[2], want_shard, "reduce_scatter_rows");
  expect_close(overlapped[3], want, "all_reduce_rows");
}

TEST(TpPrimitives, WrongSizesAreRefused) {
  CommScheduler sched(Device::cpu());
  TpGroup g(*g_world, sched, true);
  Tensor x = Tensor::zeros({7 * S() + 1, 4}, DType::F32), w = Tensor::zeros({4, 4}, DType::F32);
  Tensor y = Tensor::zeros({7, 4}, DType::F32);
  try {
    tp::linear_forward_reduce_scatter(g, y, x, w, Tensor());
    ADD_FAILURE() << "no error for tokens not divisible by tp";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.micro_batch × train.seq_len"), std::string::npos) << e.what();
  }
}

// ---- the CommScheduler's per-axis bookkeeping and the batched point-to-point ----------------

TEST(CommSchedulerAxes, ExposedTimeIsSummedPerAxis) {
  CommScheduler sched(Device::cpu());
  sched.begin_step();
  // A ring step: send to r+1, receive from r−1, in one batch (any arrival order is safe).
  Tensor mine = Tensor::from_vector(std::vector<float>{static_cast<float>(R())}, {1});
  Tensor theirs = Tensor::zeros({1}, DType::F32);
  // The last rank (rank 0 receives from it) joins the ring step 600 ms after rank 0 has said it is
  // about to issue it, so rank 0's wait covers most of that (a machine as loaded as CI's may still
  // delay rank 0 a little).
  Tensor go = Tensor::zeros({1}, DType::F32);
  const int late = S() - 1;
  if (R() == 0) g_world->send(go, late, 1)->wait();
  if (R() == late) {
    g_world->recv(go, 0, 1)->wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  }
  CommScheduler::Ticket tp = sched.issue(
      "ring step", 4,
      [&] {
        return g_world->batch_send_recv(std::vector<P2PTransfer>{P2PTransfer::send(mine, (R() + 1) % S()),
                                                                 P2PTransfer::recv(theirs, (R() + S() - 1) % S())});
      },
      MeshAxis::TP);
  sched.wait(tp);
  EXPECT_EQ(theirs.data<float>()[0], static_cast<float>((R() + S() - 1) % S()));
  Tensor sum = Tensor::from_vector(std::vector<float>{1.0f}, {1});
  CommScheduler::Ticket dp = sched.issue("all_reduce", 4, [&] { return g_world->all_reduce(sum, ReduceOp::Sum); });
  sched.wait(dp);
  EXPECT_EQ(sum.data<float>()[0], static_cast<float>(S()));
  const auto& recs = sched.end_step();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].axis, MeshAxis::TP);
  EXPECT_EQ(recs[1].axis, MeshAxis::DP);
  EXPECT_DOUBLE_EQ(sched.exposed_ms(MeshAxis::TP), recs[0].waited_ms);
  EXPECT_DOUBLE_EQ(sched.exposed_ms(MeshAxis::DP), recs[1].waited_ms);
  EXPECT_DOUBLE_EQ(sched.exposed_ms(MeshAxis::PP), 0.0);
  EXPECT_DOUBLE_EQ(sched.exposed_ms(), recs[0].waited_ms + recs[1].waited_ms);
  if (R() == 0) {
    EXPECT_GE(recs[0].waited_ms, 100.0) << "rank 0 waited for the late rank on the TP axis";
  }
  // A new step starts from nothing.
  sched.begin_step();
  EXPECT_TRUE(sched.records().empty());
  EXPECT_DOUBLE_EQ(sched.exposed_ms(MeshAxis::TP), 0.0);
}

TEST(BatchSendRecv, EveryPairAtOnceAndToSelf) {
  // Every rank sends a distinct value to every rank (itself included) in one batch.
  std::vector<Tensor> out, in;
  std::vector<P2PTransfer> batch;
  for (int q = 0; q < S(); ++q) {
    out.push_back(Tensor::from_vector(std::vector<float>{static_cast<float>(100 * R() + q), 1.0f}, {2}));
    in.push_back(Tensor::zeros({2}, DType::F32));
  }
  for (int q = 0; q < S(); ++q) {
    batch.push_back(P2PTransfer::recv(in[static_cast<size_t>(q)], q));
    batch.push_back(P2PTransfer::send(out[static_cast<size_t>(q)], q));
  }
  batch.push_back(P2PTransfer::send(Tensor::zeros({0}, DType::F32), (R() + 1) % S()));  // empty: skipped
  g_world->batch_send_recv(batch)->wait();
  for (int q = 0; q < S(); ++q)
    EXPECT_EQ(in[static_cast<size_t>(q)].data<float>()[0], static_cast<float>(100 * q + R()));
}

}  // namespace
}  // namespace tetra::test

int main(int argc, char** argv) {
  tetra::mpi_initialize(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  tetra::test::g_world = tetra::MpiCommunicator::world();
  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  tetra::test::g_world.reset();
  tetra::mpi_finalize();
  return worst;
}
