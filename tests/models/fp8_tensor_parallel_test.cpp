// The FP8 GEMMs of the tensor-parallel projections (models/fp8_tensor_parallel.h) on CPU ranks under
// mpirun (the group is the world, tp = 2 or 4): every step of a column- and a row-parallel layer —
// forward, input gradient, weight gradient — with and without sequence parallelism, plain and
// overlapped, against the one-rank FP8 layer (models/fp8_linear.h) on the full tensors, for both
// recipes. Each rank's part of x, w and dy holds a value 8× its neighbours' (on rank 0 only), so a
// rank that cast its part with its own amax instead of the whole's would read other codes: off by the
// FP8 rounding (≥ 1e-3 norm-wise), where the right casts differ from one rank only by the order of
// fp32 sums over the split K (≤ 1e-6). I and O are 128·tp (blockwise: each slice whole 128-wide
// groups), M = 16 rows per shard (the FP8 GEMMs' multiple).
//
// usage: mpirun -np TP fp8_tensor_parallel_test
#include <gtest/gtest.h>
#include <mpi.h>

#include "models/fp8_tensor_parallel.h"
#include "parallel/tensor/tensor_parallel.h"
#include "runtime/mpi_communicator.h"
#include "tests/parallel/tensor/tp_problem.h"

namespace tetra::test {
namespace {

std::unique_ptr<MpiCommunicator> g_world;
int R() { return g_world->rank(); }
int S() { return g_world->size(); }

constexpr double kTol = 1e-6;
using fp8_tp::Part;

TpProblem problem(uint64_t seed) {
  TpProblem p(S(), 16, 128 * S(), 128 * S(), seed);
  // The largest |value| of x, w and dy on rank 0's shard, columns and rows alike.
  for (Tensor* t : {&p.x, &p.w, &p.dy}) t->data<float>()[0] = 8.0f;
  return p;
}

struct Layout {
  bool sequence_parallel, overlap;
};

// Runs body(tp) for each recipe and layout on a fresh scheduler step.
template <class F>
void for_each_case(F body) {
  for (Fp8Recipe recipe : {Fp8Recipe::Tensorwise, Fp8Recipe::Blockwise})
    for (Layout l : {Layout{false, false}, Layout{true, false}, Layout{true, true}}) {
      CommScheduler sched(Device::cpu());
      sched.begin_step();
      TensorParallel tp(*g_world, sched, l.sequence_parallel, l.overlap);
      SCOPED_TRACE(std::string(fp8_recipe_name(recipe)) + (l.sequence_parallel ? " sp" : "") +
                   (l.overlap ? " overlap" : ""));
      body(recipe, tp);
      sched.end_step();
    }
}

Tensor fp8_forward(Fp8Recipe recipe, const Tensor& x, const Tensor& w) {
  Tensor y = Tensor::empty({x.dim(0), w.dim(0)}, DType::F32);
  fp8_linear::forward(recipe, y, x, w, /*accumulate=*/false);
  return y;
}

TEST(Fp8TensorParallel, ColumnParallelLayer) {
  const TpProblem p = problem(3);
  for_each_case([&](Fp8Recipe recipe, TensorParallel& tp) {
    const Tensor w = p.w_rows(R()), b = p.b_rows(R());
    // forward: y [N, O/tp] = x · w_rᵀ + b_r
    Tensor want = fp8_forward(recipe, p.x, p.w);
    ops::add_bias(want, p.b);
    const Tensor x = tp.sequence_parallel() ? p.x_shard(R()) : p.x;
    Tensor y = poisoned({p.n, p.out_slice()}), x_full = poisoned({p.n, p.in});
    const tp::LinearGemms fwd =
        fp8_tp::forward(recipe, tp, w, x, tp.sequence_parallel() ? Part::Split : Part::Whole);
    tp.column_forward(y, x, &x_full, w, b, ops::Activation::None, nullptr, &fwd);
    EXPECT_LE(rel_error(y, columns(want, R() * p.out_slice(), p.out_slice())), kTol) << "forward";
    // input gradient: dx = Σ_r dy_r · w_r (reduce-scattered under sequence parallelism); the
    // weight gradient dw_r = dy_rᵀ · x as the overlapped work.
    Tensor dx_all = Tensor::empty({p.n, p.in}, DType::F32), dw_all = Tensor::zeros({p.out, p.in}, DType::F32);
    fp8_linear::backward_input(recipe, dx_all, p.dy, p.w, /*accumulate=*/false);
    fp8_linear::backward_weight(recipe, dw_all, p.dy, p.x);
    const Tensor dy = p.dy_cols(R());
    Tensor dx = poisoned({tp.local_rows(p.n, "test"), p.in}), dw = Tensor::zeros({p.out_slice(), p.in}, DType::F32);
    const tp::LinearGemms bwd = fp8_tp::backward_input(recipe, tp, w, dy, Part::Split);
    tp.column_backward_input(
        dx, dy, w, [&] { fp8_tp::backward_weight(recipe, tp, dw, dy, Part::Split, p.x, Part::Whole); }, &bwd);
    EXPECT_LE(rel_error(dx, tp.sequence_parallel() ? rows(dx_all, R() * p.m, p.m) : dx_all), kTol) << "input gradient";
    EXPECT_LE(rel_error(dw, rows(dw_all, R() * p.out_slice(), p.out_slice())), kTol) << "weight gradient";
  });
}

TEST(Fp8TensorParallel, RowParallelLayer) {
  const TpProblem p = problem(5);
  for_each_case([&](Fp8Recipe recipe, TensorParallel& tp) {
    const Tensor w = p.w_cols(R()), x = p.x_cols(R());
    // forward: y = Σ_r x_r · w_rᵀ + b + residual (reduce-scattered under sequence parallelism)
    Tensor want = fp8_forward(recipe, p.x, p.w);
    ops::add_bias(want, p.b);
    ops::add(want, want, p.residual);
    const bool sp = tp.sequence_parallel();
    const Tensor residual = sp ? p.residual_shard(R()) : p.residual;
    Tensor y = poisoned({tp.local_rows(p.n, "test"), p.out});
    const tp::LinearGemms fwd = fp8_tp::forward(recipe, tp, w, x, Part::Split);
    tp.row_forward(y, x, w, p.b, &residual, &fwd);
    EXPECT_LE(rel_error(y, sp ? rows(want, R() * p.m, p.m) : want), kTol) << "forward";
    // input gradient: dx_r = dy · w_r (dy gathered under sequence parallelism); weight gradient
    // dw_r = dyᵀ · x_r.
    Tensor dx_all = Tensor::empty({p.n, p.in}, DType::F32), dw_all = Tensor::zeros({p.out, p.in}, DType::F32);
    fp8_linear::backward_input(recipe, dx_all, p.dy, p.w, /*accumulate=*/false);
    fp8_linear::backward_weight(recipe, dw_all, p.dy, p.x);
    const Tensor dy = sp ? p.dy_shard(R()) : p.dy;
    Tensor dx = poisoned({p.n, p.in_slice()}), dy_full = poisoned({p.n, p.out});
    Tensor dw = Tensor::zeros({p.out, p.in_slice()}, DType::F32);
    const tp::LinearGemms bwd = fp8_tp::backward_input(recipe, tp, w, dy, sp ? Part::Split : Part::Whole);
    tp.row_backward_input(dx, dy, &dy_full, w, nullptr, &bwd);
    fp8_tp::backward_weight(recipe, tp, dw, sp ? dy_full : p.dy, Part::Whole, x, Part::Split);
    EXPECT_LE(rel_error(dx, columns(dx_all, R() * p.in_slice(), p.in_slice())), kTol) << "input gradient";
    EXPECT_LE(rel_error(dw, columns(dw_all, R() * p.in_slice(), p.in_slice())), kTol) << "weight gradient";
  });
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
