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

#include <cstring>

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

// The bytes the scheduler recorded for the column-parallel forward's gather (one all-gather, or the
// ring's steps under overlap).
int64_t forward_gather_bytes(const CommScheduler& sched) {
  int64_t bytes = 0;
  for (const CommScheduler::Record& r : sched.records())
    if (r.name.find("all_gather_linear_forward") != std::string::npos) bytes += r.bytes;
  return bytes;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// Sequence parallelism's column-parallel forward with the layer keeping what its weight gradient
// reads (gathered_forward): under tensorwise each rank casts its shard with the whole's amax and the
// group gathers the codes, so the kept xᵀ is bit for bit the transposed copy of casting the gathered
// x, and the gather moves a byte an element — a quarter of the working dtype's bytes here (fp32 on
// the CPU; half of bf16's on a GPU), as the scheduler records them. Blockwise gathers x in the
// working dtype (its xᵀ takes 128-token tiles the forward's codes cannot give) and keeps nothing.
// Both: the forward and weight gradient as the one-rank layer's, plain and overlapped.
TEST(Fp8TensorParallel, SequenceParallelGatherCastsFirst) {
  const TpProblem p = problem(7);
  for (bool overlap : {false, true}) {
    int64_t working_bytes = 0;
    for (Fp8Recipe recipe : {Fp8Recipe::None, Fp8Recipe::Tensorwise, Fp8Recipe::Blockwise}) {
      SCOPED_TRACE(std::string(fp8_recipe_name(recipe)) + (overlap ? " overlap" : ""));
      CommScheduler sched(Device::cpu());
      sched.begin_step();
      TensorParallel tp(*g_world, sched, /*sequence_parallel=*/true, overlap);
      const Tensor w = p.w_rows(R()), b = p.b_rows(R()), x = p.x_shard(R());
      Fp8Saved keep;
      Tensor y = poisoned({p.n, p.out_slice()}), x_full = poisoned({p.n, p.in});
      const tp::LinearGemms fwd = fp8_tp::gathered_forward(recipe, tp, w, x, &keep);
      tp.column_forward(y, x, &x_full, w, b, ops::Activation::None, nullptr, &fwd);
      const int64_t bytes = forward_gather_bytes(sched);
      sched.end_step();
      ASSERT_GT(bytes, 0);
      if (recipe == Fp8Recipe::None) {
        working_bytes = bytes;
        continue;
      }
      Tensor want = fp8_forward(recipe, p.x, p.w);
      ops::add_bias(want, p.b);
      EXPECT_LE(rel_error(y, columns(want, R() * p.out_slice(), p.out_slice())), kTol) << "forward";
      if (recipe == Fp8Recipe::Tensorwise) {
        EXPECT_EQ(bytes * static_cast<int64_t>(dtype_size(p.x.dtype())), working_bytes) << "a byte an element";
        Fp8Operand whole_t;
        const Fp8Operand whole = fp8_linear::cast(p.x, fp8_recipe_casts(recipe).activation, &whole_t);
        ASSERT_TRUE(keep.x_t.defined());
        EXPECT_TRUE(same_bits(keep.x_t.q, whole_t.q)) << "xᵀ codes";
        EXPECT_TRUE(same_bits(keep.x_t.scale, whole.scale)) << "xᵀ scale";
      } else {
        EXPECT_EQ(bytes, working_bytes) << "blockwise gathers the working dtype";
        EXPECT_FALSE(keep.x_t.defined());
        EXPECT_TRUE(same_bits(x_full, p.x)) << "the gathered x";
      }
      // The weight gradient reads the kept xᵀ (tensorwise; x_full is not written) or casts x_full.
      Tensor dw_all = Tensor::zeros({p.out, p.in}, DType::F32), dw = Tensor::zeros({p.out_slice(), p.in}, DType::F32);
      fp8_linear::backward_weight(recipe, dw_all, p.dy, p.x);
      fp8_tp::backward_weight(recipe, tp, dw, p.dy_cols(R()), Part::Split, x_full, Part::Whole, &keep);
      EXPECT_LE(rel_error(dw, rows(dw_all, R() * p.out_slice(), p.out_slice())), kTol) << "weight gradient";
      EXPECT_FALSE(keep.x_t.defined()) << "released by the weight gradient";
    }
  }
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
