// The tensor-parallel communication primitives (parallel/tensor/linear.h) on GPUs, one process per
// rank under mpirun, the group being every rank. Every primitive's CUDA path (cuBLASLt chunk GEMMs,
// the CUDA partial sum, the CommScheduler's streams and events) against the CPU twin of its math —
// the single-rank computation on the host from the same bf16-rounded inputs — in fp32 and bf16,
// outputs poisoned first; the overlapped and the plain path against each other bit for bit on the
// GPU; device timings recorded on the TP axis; and (NCCL) an overlapped step captured into a CUDA
// graph and replayed with new inputs.
//
//   tp_gpu_test --comm nccl     every rank on its own GPU (NCCL send/recv and all-gather); skips
//                               (exit 77) with fewer GPUs than ranks on a host
//   tp_gpu_test --comm staged   ranks may share one GPU: device tensors travel over MPI through
//                               host memory (tests/parallel/tensor/host_staged_communicator.h), which NCCL
//                               cannot do for two ranks on one GPU; no overlap happens, but every
//                               CUDA kernel, stream and event of the primitives runs. Skips
//                               (exit 77) without a GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "parallel/comm_scheduler.h"
#include "parallel/tensor/all_gather.h"
#include "parallel/tensor/linear.h"
#include "parallel/tensor/reduce_scatter.h"
#include "runtime/cuda_graph.h"
#include "runtime/mpi_communicator.h"
#include "runtime/nccl_communicator.h"
#include "tests/runtime/cuda/gpu_test_util.h"
#include "tests/runtime/cuda/mpi_gpu_test_main.h"
#include "tests/parallel/tensor/host_staged_communicator.h"
#include "tests/parallel/tensor/tp_problem.h"

namespace tetra::gputest {
namespace {

std::unique_ptr<MpiCommunicator> g_mpi;
std::unique_ptr<Communicator> g_comm;
bool g_nccl = false;
int R() { return g_comm->rank(); }
int S() { return g_comm->size(); }

// M = 37 rows per shard (odd); feature slices multiples of 8 (cuBLASLt's bf16 alignment).
test::TpProblem problem(uint64_t seed, DType dt) {
  test::TpProblem p(S(), 37, 64 * S(), 48 * S(), seed);
  for (Tensor* t : {&p.x, &p.w, &p.b, &p.residual, &p.dy, &p.gelu_pre}) *t = representable(*t, dt);
  return p;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor ha = download_raw(a), hb = download_raw(b);
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.data_ptr(), hb.data_ptr(), ha.nbytes()) == 0;
}

// Runs body(g) without and with overlap; checks the outputs agree bit for bit and that the TP
// records carry device timings; returns the overlapped run's outputs.
template <class F>
std::vector<Tensor> both_paths(F body, const std::string& what) {
  std::vector<Tensor> out[2];
  for (int overlap = 0; overlap < 2; ++overlap) {
    CommScheduler sched(gpu());
    sched.begin_step();
    TpGroup g(*g_comm, sched, overlap == 1);
    out[overlap] = body(g);
    const auto& recs = sched.end_step();
    EXPECT_FALSE(recs.empty()) << what;
    for (const CommScheduler::Record& r : recs) {
      EXPECT_EQ(r.axis, MeshAxis::TP) << what << " " << r.name;
      EXPECT_GE(r.start_ms, 0.0) << what << " " << r.name;
      EXPECT_GE(r.end_ms, r.start_ms) << what << " " << r.name;
      EXPECT_GE(r.waited_ms, 0.0) << what << " " << r.name;
    }
  }
  for (size_t i = 0; i < out[0].size(); ++i)
    EXPECT_TRUE(same_bits(out[0][i], out[1][i])) << what << " output " << i << ": overlapped and plain differ";
  return out[1];
}

std::string label(const char* what, DType dt) {
  return std::string(what) + " " + name(dt) + " rank " + std::to_string(R());
}

TEST(TpGpu, AllGatherLinearForward) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const test::TpProblem p = problem(11, dt);
    Tensor ref = Tensor::empty({p.n, p.out}, DType::F32), ref_pre = Tensor::empty({p.n, p.out}, DType::F32);
    ops::linear_forward(ref, p.x, p.w, p.b, ops::Activation::Gelu, &ref_pre);
    Tensor x = upload(p.x_shard(R()), dt), w = upload(p.w_rows(R()), dt), b = upload(p.b_rows(R()), dt);
    auto out = both_paths(
        [&](TpGroup& g) {
          Tensor y = poisoned({p.n, p.out_slice()}, dt), pre = poisoned({p.n, p.out_slice()}, dt);
          Tensor xg = poisoned({p.n, p.in}, dt);
          tp::all_gather_linear_forward(g, y, x, w, b, ops::Activation::Gelu, &pre, &xg);
          return std::vector<Tensor>{y, pre, xg};
        },
        label("all_gather_linear_forward", dt));
    EXPECT_LE(rel_error(out[0], test::columns(ref, R() * p.out_slice(), p.out_slice())), tol(dt)) << label("y", dt);
    EXPECT_LE(rel_error(out[1], test::columns(ref_pre, R() * p.out_slice(), p.out_slice())), tol(dt))
        << label("pre_act", dt);
    EXPECT_EQ(rel_error(out[2], p.x), 0.0) << label("x_gathered", dt);
  }
}

TEST(TpGpu, LinearForwardReduceScatter) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const test::TpProblem p = problem(21, dt);
    Tensor ref = Tensor::empty({p.n, p.out}, DType::F32);
    ops::linear_forward(ref, p.x, p.w, p.b, ops::Activation::None, nullptr, &p.residual);
    Tensor x = upload(p.x_cols(R()), dt), w = upload(p.w_cols(R()), dt), b = upload(p.b, dt);
    Tensor res = upload(p.residual_shard(R()), dt);
    auto out = both_paths(
        [&](TpGroup& g) {
          Tensor y = poisoned({p.m, p.out}, dt);
          tp::linear_forward_reduce_scatter(g, y, x, w, b, &res);
          return std::vector<Tensor>{y};
        },
        label("linear_forward_reduce_scatter", dt));
    EXPECT_LE(rel_error(out[0], test::rows(ref, R() * p.m, p.m)), tol(dt)) << label("y_shard", dt);
  }
}

TEST(TpGpu, LinearBackwardInputReduceScatterWithTheWeightGradient) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const test::TpProblem p = problem(31, dt);
    Tensor ref = Tensor::empty({p.n, p.in}, DType::F32), ref_dw = Tensor::empty({p.out, p.in}, DType::F32);
    ops::linear_backward_input(ref, p.dy, p.w);
    ops::linear_backward_weight(ref_dw, nullptr, p.dy, p.x, false);
    Tensor dy = upload(p.dy_cols(R()), dt), w = upload(p.w_rows(R()), dt), x = upload(p.x, dt);
    auto out = both_paths(
        [&](TpGroup& g) {
          Tensor dx = poisoned({p.m, p.in}, dt), dw = poisoned({p.out_slice(), p.in}, DType::F32);
          tp::linear_backward_input_reduce_scatter(g, dx, dy, w,
                                                   [&] { ops::linear_backward_weight(dw, nullptr, dy, x, false); });
          return std::vector<Tensor>{dx, dw};
        },
        label("linear_backward_input_reduce_scatter", dt));
    EXPECT_LE(rel_error(out[0], test::rows(ref, R() * p.m, p.m)), tol(dt)) << label("dx_shard", dt);
    EXPECT_LE(rel_error(out[1], test::rows(ref_dw, R() * p.out_slice(), p.out_slice())), tol(dt)) << label("dw", dt);
  }
}

TEST(TpGpu, AllGatherLinearBackwardInput) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const test::TpProblem p = problem(41, dt);
    Tensor ref = Tensor::empty({p.n, p.in}, DType::F32);
    ops::linear_backward_input_gelu(ref, p.dy, p.w, p.gelu_pre);
    Tensor dy = upload(p.dy_shard(R()), dt), w = upload(p.w_cols(R()), dt), pre = upload(p.gelu_pre_cols(R()), dt);
    auto out = both_paths(
        [&](TpGroup& g) {
          Tensor dx = poisoned({p.n, p.in_slice()}, dt), dyg = poisoned({p.n, p.out}, dt);
          tp::all_gather_linear_backward_input(g, dx, dy, w, &pre, &dyg);
          return std::vector<Tensor>{dx, dyg};
        },
        label("all_gather_linear_backward_input", dt));
    EXPECT_LE(rel_error(out[0], test::columns(ref, R() * p.in_slice(), p.in_slice())), tol(dt)) << label("dx", dt);
    EXPECT_EQ(rel_error(out[1], p.dy), 0.0) << label("dy_gathered", dt);
  }
}

TEST(TpGpu, AllReduceForms) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const test::TpProblem p = problem(51, dt);
    Tensor ref_y = Tensor::empty({p.n, p.out}, DType::F32), ref_dx = Tensor::empty({p.n, p.in}, DType::F32);
    ops::linear_forward(ref_y, p.x, p.w, p.b, ops::Activation::None, nullptr, &p.residual);
    ops::linear_backward_input(ref_dx, p.dy, p.w);
    Tensor x = upload(p.x_cols(R()), dt), wc = upload(p.w_cols(R()), dt), b = upload(p.b, dt);
    Tensor res = upload(p.residual, dt), dy = upload(p.dy_cols(R()), dt), wr = upload(p.w_rows(R()), dt);
    auto out = both_paths(
        [&](TpGroup& g) {
          Tensor y = poisoned({p.n, p.out}, dt), dx = poisoned({p.n, p.in}, dt);
          tp::linear_forward_all_reduce(g, y, x, wc, b, &res);
          tp::linear_backward_input_all_reduce(g, dx, dy, wr);
          return std::vector<Tensor>{y, dx};
        },
        label("all-reduce forms", dt));
    EXPECT_LE(rel_error(out[0], ref_y), tol(dt)) << label("y", dt);
    EXPECT_LE(rel_error(out[1], ref_dx), tol(dt)) << label("dx", dt);
  }
}

// An overlapped forward + backward pair captured into a CUDA graph (the trainer captures whole
// steps) and replayed with new inputs written into the captured buffers: the same bits as eager.
TEST(TpGpu, OverlappedPathReplaysFromACudaGraph) {
  if (!g_nccl) GTEST_SKIP() << "the staged communicator synchronises the host: it cannot be captured";
  const DType dt = DType::BF16;
  const test::TpProblem p = problem(61, dt), q = problem(62, dt);
  Tensor x = upload(p.x_shard(R()), dt), w = upload(p.w_rows(R()), dt), b = upload(p.b_rows(R()), dt);
  Tensor y = poisoned({p.n, p.out_slice()}, dt), back = poisoned({p.m, p.in}, dt);
  CommScheduler sched(gpu());
  TpGroup g(*g_comm, sched, true);
  auto step = [&] {
    tp::all_gather_linear_forward(g, y, x, w, b);
    tp::linear_backward_input_reduce_scatter(g, back, y, w);
  };
  // Eager on q's inputs, for the reference.
  ops::copy(x, upload(q.x_shard(R()), dt));
  sched.begin_step();
  step();
  sched.end_step();
  Tensor y_eager = download_raw(y), back_eager = download_raw(back);
  // Capture on p's inputs (nothing runs), then replay on q's.
  ops::copy(x, upload(p.x_shard(R()), dt));
  Stream capture = Stream::create(gpu());
  Event ready(gpu());
  ready.record();
  ready.block(capture);
  CudaGraph graph(gpu());
  {
    StreamGuard on(capture);
    graph.begin_capture();  // as the trainer does: the step's records begin inside the capture
    sched.begin_step(/*for_graph=*/true);
    step();
    graph.end_capture();
  }
  ops::copy(x, upload(q.x_shard(R()), dt));
  poison(y);
  poison(back);
  device_synchronize(gpu());
  {
    StreamGuard on(capture);
    sched.begin_replay();
    graph.replay();
    sched.end_step();
  }
  device_synchronize(gpu());
  EXPECT_EQ(std::memcmp(download_raw(y).data_ptr(), y_eager.data_ptr(), y_eager.nbytes()), 0);
  EXPECT_EQ(std::memcmp(download_raw(back).data_ptr(), back_eager.data_ptr(), back_eager.nbytes()), 0);
  for (const CommScheduler::Record& r : sched.records()) EXPECT_GE(r.end_ms, 0.0) << r.name;
}

}  // namespace
}  // namespace tetra::gputest

int main(int argc, char** argv) {
  using namespace tetra;
  using namespace tetra::gputest;
  std::string mode = "nccl";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--comm") mode = argv[i + 1];
  if (mode != "nccl" && mode != "staged") {
    std::fprintf(stderr, "tp_gpu_test: --comm %s: use nccl or staged\n", mode.c_str());
    return 2;
  }
  return run_mpi_gpu_tests(
      argc, argv, "the tensor-parallel GPU tests (--comm " + mode + ")", {.share_gpus = mode == "staged"},
      [&] {
        g_mpi = MpiCommunicator::world();
        g_nccl = mode == "nccl";
        if (g_nccl)
          g_comm = make_nccl_communicator(MPI_COMM_WORLD, gpu(), nullptr);
        else
          g_comm = std::make_unique<HostStagedCommunicator>(*g_mpi);
      },
      [] {
        g_comm.reset();
        g_mpi.reset();
      });
}
