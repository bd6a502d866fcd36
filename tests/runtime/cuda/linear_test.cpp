// CUDA dense layer (cuBLASLt with fused bias / GELU / GELU-gradient epilogues and their unfused
// fallbacks, the bias gradient as a column sum, the residual fused as cuBLASLt's C operand) against
// the CPU twin, on GPT-2 124M shapes and on odd sizes, fp32 and bf16, with and without
// accumulation, with fp32 outputs from bf16 inputs, the bias gradient from a given column sum; and
// the GEMM autotuner: it never writes the caller's outputs, and it stays out of CUDA graph captures.
#include <cuda_runtime.h>

#include <cmath>
#include <sstream>
#include <string>

#include "runtime/cuda/cublaslt.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

using ops::Activation;

Shape with_last(Shape lead, int64_t last) {
  lead.push_back(last);
  return lead;
}

// Values representable in bf16 serve both dtypes, so one CPU reference covers fp32 and bf16 runs.
Tensor rand_bf16(Rng& rng, const Shape& shape, double scale) {
  return representable(random_host(rng, shape, scale), DType::BF16);
}

Tensor host_sum(const Tensor& a, const Tensor& b) {
  Tensor s = Tensor::empty(a.shape(), DType::F32);
  ops::add(s, a, b);
  return s;
}

struct Case {
  Shape lead;  // leading dimensions of x / y (their product is N)
  int64_t I, O;
  bool variants;  // also the no-bias and mixed-precision variants (cheap shapes only)
};

std::string label(const Case& c, DType dt, DType out, const char* what) {
  std::ostringstream os;
  os << what << ": N=" << shape_numel(c.lead) << " I=" << c.I << " O=" << c.O << " in " << dtype_name(dt) << " out "
     << dtype_name(out);
  return os.str();
}

// The CPU references of one case: three GEMMs, and what derives from them.
struct References {
  Tensor x, w, b, dy, dx0, dw0, db0, res, x_pre;  // the inputs (bf16-representable)
  Tensor pre, y_gelu, dx, dw, db, dx_acc, dw_acc, db_acc, dx_gelu, y_res;
  Tensor pre_nobias, y_gelu_nobias, y_res_nobias;  // c.variants only
};

References cpu_references(const Case& c, uint64_t seed) {
  Rng rng(seed);
  const Shape x_shape = with_last(c.lead, c.I), y_shape = with_last(c.lead, c.O);
  References r;
  r.x = rand_bf16(rng, x_shape, 1.0);
  r.w = rand_bf16(rng, {c.O, c.I}, 1.0 / std::sqrt(static_cast<double>(c.I)));
  r.b = rand_bf16(rng, {c.O}, 0.5);
  r.dy = rand_bf16(rng, y_shape, 1.0);
  r.dx0 = rand_bf16(rng, x_shape, 1.0);
  r.dw0 = rand_bf16(rng, {c.O, c.I}, 0.1);
  r.db0 = rand_bf16(rng, {c.O}, 1.0);
  r.pre = Tensor::empty(y_shape, DType::F32), r.y_gelu = Tensor::empty(y_shape, DType::F32);
  ops::linear_forward(r.y_gelu, r.x, r.w, r.b, Activation::Gelu, &r.pre);
  r.dx = Tensor::empty(x_shape, DType::F32);
  ops::linear_backward_input(r.dx, r.dy, r.w, false);
  r.dw = Tensor::empty({c.O, c.I}, DType::F32), r.db = Tensor::empty({c.O}, DType::F32);
  ops::linear_backward_weight(r.dw, &r.db, r.dy, r.x, false);
  r.dx_acc = host_sum(r.dx, r.dx0), r.dw_acc = host_sum(r.dw, r.dw0), r.db_acc = host_sum(r.db, r.db0);
  // The input gradient through a GELU that produced x: dx ⊙ gelu'(x_pre).
  r.x_pre = rand_bf16(rng, x_shape, 2.0), r.dx_gelu = Tensor::empty(x_shape, DType::F32);
  ops::gelu_backward(r.dx_gelu, r.dx, r.x_pre);
  if (c.variants) {
    r.pre_nobias = Tensor::empty(y_shape, DType::F32);
    ops::linear_forward(r.pre_nobias, r.x, r.w, Tensor(), Activation::None);
    r.y_gelu_nobias = Tensor::empty(y_shape, DType::F32);
    ops::gelu_forward(r.y_gelu_nobias, r.pre_nobias);
  }
  // The residual connection fused into the projection: y = x·wᵀ + b + residual.
  r.res = rand_bf16(rng, y_shape, 1.0);
  r.y_res = Tensor::empty(y_shape, DType::F32);
  ops::linear_forward(r.y_res, r.x, r.w, r.b, Activation::None, nullptr, &r.res);
  if (c.variants) {
    r.y_res_nobias = Tensor::empty(y_shape, DType::F32);
    ops::linear_forward(r.y_res_nobias, r.x, r.w, Tensor(), Activation::None, nullptr, &r.res);
  }
  return r;
}

// The device operands of one input dtype, and the output dtype checked.
struct Gpu {
  Tensor x, w, dy;
  DType dt, out;
};

void check_forward(const Case& c, const References& r, const Gpu& g) {
  const Shape y_shape = with_last(c.lead, c.O);
  const DType dt = g.dt, out = g.out;
  const double t = tol(out);
  Tensor gb_out = upload(r.b, out);
  Tensor y = poisoned(y_shape, out);
  ops::linear_forward(y, g.x, g.w, gb_out, Activation::None);
  EXPECT_LE(close_error(y, r.pre), t) << label(c, dt, out, "forward + bias");

  Tensor yg = poisoned(y_shape, out), p = poisoned(y_shape, out);
  ops::linear_forward(yg, g.x, g.w, gb_out, Activation::Gelu, &p);
  EXPECT_LE(close_error(yg, r.y_gelu), t) << label(c, dt, out, "forward + bias + GELU, y");
  EXPECT_LE(close_error(p, r.pre), t) << label(c, dt, out, "forward + bias + GELU, pre_act");

  Tensor yg2 = poisoned(y_shape, out);
  ops::linear_forward(yg2, g.x, g.w, gb_out, Activation::Gelu);
  EXPECT_LE(close_error(yg2, r.y_gelu), t) << label(c, dt, out, "forward + bias + GELU, no pre_act");

  if (c.variants) {
    Tensor y0 = poisoned(y_shape, out);
    ops::linear_forward(y0, g.x, g.w, Tensor(), Activation::None);
    EXPECT_LE(close_error(y0, r.pre_nobias), t) << label(c, dt, out, "forward, no bias");
    Tensor yg0 = poisoned(y_shape, out), p0 = poisoned(y_shape, out);
    ops::linear_forward(yg0, g.x, g.w, Tensor(), Activation::Gelu, &p0);
    EXPECT_LE(close_error(yg0, r.y_gelu_nobias), t) << label(c, dt, out, "forward + GELU, no bias, y");
    EXPECT_LE(close_error(p0, r.pre_nobias), t) << label(c, dt, out, "forward + GELU, no bias, pre_act");
  }
}

void check_forward_residual(const Case& c, const References& r, const Gpu& g) {
  const Shape y_shape = with_last(c.lead, c.O);
  const DType dt = g.dt, out = g.out;
  const double t = tol(out);
  Tensor gb_out = upload(r.b, out), gres = upload(r.res, out);
  Tensor yr = poisoned(y_shape, out);
  ops::linear_forward(yr, g.x, g.w, gb_out, Activation::None, nullptr, &gres);
  EXPECT_LE(close_error(yr, r.y_res), t) << label(c, dt, out, "forward + bias + residual");
  EXPECT_EQ(close_error(gres, r.res), 0.0) << label(c, dt, out, "forward + bias + residual: residual unchanged");
  Tensor y_alias = upload(r.res, out);  // y is the residual: C = D in cuBLASLt
  ops::linear_forward(y_alias, g.x, g.w, gb_out, Activation::None, nullptr, &y_alias);
  EXPECT_LE(close_error(y_alias, r.y_res), t) << label(c, dt, out, "forward + bias + residual, in place");
  if (c.variants) {
    Tensor yr0 = poisoned(y_shape, out);
    ops::linear_forward(yr0, g.x, g.w, Tensor(), Activation::None, nullptr, &gres);
    EXPECT_LE(close_error(yr0, r.y_res_nobias), t) << label(c, dt, out, "forward + residual, no bias");
    Tensor y_alias0 = upload(r.res, out);
    ops::linear_forward(y_alias0, g.x, g.w, Tensor(), Activation::None, nullptr, &y_alias0);
    EXPECT_LE(close_error(y_alias0, r.y_res_nobias), t) << label(c, dt, out, "forward + residual, no bias, in place");
  }
}

void check_backward_input(const Case& c, const References& r, const Gpu& g) {
  const Shape x_shape = with_last(c.lead, c.I);
  const DType dt = g.dt, out = g.out;
  const double t = tol(out);
  Tensor gdx = poisoned(x_shape, out);
  ops::linear_backward_input(gdx, g.dy, g.w, false);
  EXPECT_LE(close_error(gdx, r.dx), t) << label(c, dt, out, "backward input");
  Tensor gdx_acc = upload(r.dx0, out);
  ops::linear_backward_input(gdx_acc, g.dy, g.w, true);
  EXPECT_LE(close_error(gdx_acc, r.dx_acc), t) << label(c, dt, out, "backward input, accumulate");
  if (out == dt) {  // gelu_pre has dx's dtype, and the inputs' (no mixed GELU backward)
    Tensor gdxg = poisoned(x_shape, out);
    ops::linear_backward_input_gelu(gdxg, g.dy, g.w, upload(r.x_pre, out));
    EXPECT_LE(close_error(gdxg, r.dx_gelu), t) << label(c, dt, out, "backward input through GELU");
  }
}

void check_backward_weight(const Case& c, const References& r, const Gpu& g) {
  const DType dt = g.dt, out = g.out;
  const double t = tol(out);
  Tensor gdw = poisoned({c.O, c.I}, out), gdb = poisoned({c.O}, out);
  ops::linear_backward_weight(gdw, &gdb, g.dy, g.x, false);
  EXPECT_LE(close_error(gdw, r.dw), t) << label(c, dt, out, "backward weight, dw");
  EXPECT_LE(close_error(gdb, r.db), t) << label(c, dt, out, "backward weight, db");
  Tensor gdw_acc = upload(r.dw0, out), gdb_acc = upload(r.db0, out);
  ops::linear_backward_weight(gdw_acc, &gdb_acc, g.dy, g.x, true);
  EXPECT_LE(close_error(gdw_acc, r.dw_acc), t) << label(c, dt, out, "backward weight, accumulate, dw");
  EXPECT_LE(close_error(gdb_acc, r.db_acc), t) << label(c, dt, out, "backward weight, accumulate, db");
  Tensor gdw_only = upload(r.dw0, out);
  ops::linear_backward_weight(gdw_only, nullptr, g.dy, g.x, true);
  EXPECT_LE(close_error(gdw_only, r.dw_acc), t) << label(c, dt, out, "backward weight, accumulate, no db");
  // db from a given column sum of dy (fp32, as a LayerNorm backward hands it over): db is the
  // CPU's Σ dy (the sum given) or db0 + it, dw as before.
  Tensor gsum = upload(r.db, DType::F32);
  Tensor gdw_s = poisoned({c.O, c.I}, out), gdb_s = poisoned({c.O}, out);
  ops::linear_backward_weight(gdw_s, &gdb_s, g.dy, g.x, false, &gsum);
  EXPECT_LE(close_error(gdw_s, r.dw), t) << label(c, dt, out, "backward weight with a given sum, dw");
  EXPECT_LE(close_error(gdb_s, r.db), t) << label(c, dt, out, "backward weight with a given sum, db");
  Tensor gdw_sa = upload(r.dw0, out), gdb_sa = upload(r.db0, out);
  ops::linear_backward_weight(gdw_sa, &gdb_sa, g.dy, g.x, true, &gsum);
  EXPECT_LE(close_error(gdw_sa, r.dw_acc), t) << label(c, dt, out, "backward weight with a given sum, accumulate, dw");
  EXPECT_LE(close_error(gdb_sa, r.db_acc), t) << label(c, dt, out, "backward weight with a given sum, accumulate, db");
}

void check_case(const Case& c, uint64_t seed) {
  const References r = cpu_references(c, seed);
  for (DType dt : {DType::F32, DType::BF16}) {
    for (DType out : {DType::F32, DType::BF16}) {
      if (dt == DType::F32 && out == DType::BF16) continue;  // no fp32-in, bf16-out GEMM
      if (out != dt && !c.variants) continue;
      const Gpu g{upload(r.x, dt), upload(r.w, dt), upload(r.dy, dt), dt, out};
      check_forward(c, r, g);
      check_forward_residual(c, r, g);
      check_backward_input(c, r, g);
      check_backward_weight(c, r, g);
    }
  }
}

// GPT-2 124M: attention qkv, attention projection, MLP up, MLP down, and the LM head (padded vocab).
TEST(GpuLinear, Gpt2QkvProjection) {
  TETRA_REQUIRE_GPU();
  check_case({{4096}, 768, 2304, false}, 101);
}
TEST(GpuLinear, Gpt2AttentionOutput) {
  TETRA_REQUIRE_GPU();
  check_case({{4, 1024}, 768, 768, true}, 102);
}
TEST(GpuLinear, Gpt2MlpUp) {
  TETRA_REQUIRE_GPU();
  check_case({{4096}, 768, 3072, false}, 103);
}
TEST(GpuLinear, Gpt2MlpDown) {
  TETRA_REQUIRE_GPU();
  check_case({{4096}, 3072, 768, false}, 104);
}
TEST(GpuLinear, Gpt2LmHead) {
  TETRA_REQUIRE_GPU();
  check_case({{1024}, 768, 50304, false}, 105);
}

// Sizes that are no multiple of 8: cuBLASLt picks unaligned algorithms; O % 8 != 0 also takes the
// unfused GELU path (its aux leading dimension must be a multiple of 8).
TEST(GpuLinear, OddSizes) {
  TETRA_REQUIRE_GPU();
  check_case({{37}, 45, 29, true}, 201);
  check_case({{3, 5}, 3, 1, true}, 202);
  check_case({{1}, 1, 1, true}, 203);
  check_case({{64}, 72, 40, true}, 204);
}

// Weights at an unaligned offset of a flat buffer (a 2-byte-aligned bf16 view).
TEST(GpuLinear, UnalignedWeightView) {
  TETRA_REQUIRE_GPU();
  Rng rng(301);
  const int64_t N = 16, I = 24, O = 32;
  Tensor x = rand_bf16(rng, {N, I}, 1.0);
  Tensor flat = rand_bf16(rng, {1 + O * I}, 0.2);
  Tensor w = Tensor::empty({O, I}, DType::F32);
  std::memcpy(w.data_ptr(), flat.data<float>() + 1, w.nbytes());
  Tensor ref = Tensor::empty({N, O}, DType::F32);
  ops::linear_forward(ref, x, w, Tensor(), Activation::None);
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor gflat = upload(flat, dt);
    Tensor gw = gflat.slice_flat(1, {O, I});
    Tensor y = poisoned({N, O}, dt);
    ops::linear_forward(y, upload(x, dt), gw, Tensor(), Activation::None);
    EXPECT_LE(close_error(y, ref), tol(dt)) << dtype_name(dt);
  }
}

// Sets the GEMM tuning mode for a scope and restores the previous one.
class TuningScope {
 public:
  explicit TuningScope(cuda::GemmTuning mode) : saved_(cuda::gemm_tuning()) { cuda::set_gemm_tuning(mode); }
  ~TuningScope() { cuda::set_gemm_tuning(saved_); }

 private:
  cuda::GemmTuning saved_;
};

// Every call below is the first of its problem in this process (shapes used nowhere else), so it
// is tuned inside the call: the tuning runs must not leave their sums in accumulated outputs, in
// the residual, or in the GELU pre-activation. Once per mode: tuned, tuned with the report, and the
// heuristic's choice.
void check_tuning_leaves_outputs(int64_t N, int64_t I, int64_t O, uint64_t seed) {
  Rng rng(seed);
  Tensor x = rand_bf16(rng, {N, I}, 1.0), w = rand_bf16(rng, {O, I}, 1.0 / std::sqrt(static_cast<double>(I)));
  Tensor b = rand_bf16(rng, {O}, 0.5), dy = rand_bf16(rng, {N, O}, 1.0), res = rand_bf16(rng, {N, O}, 1.0);
  Tensor dx0 = rand_bf16(rng, {N, I}, 1.0), dw0 = rand_bf16(rng, {O, I}, 0.1), db0 = rand_bf16(rng, {O}, 1.0);
  Tensor y_res = Tensor::empty({N, O}, DType::F32), pre = Tensor::empty({N, O}, DType::F32),
         y_gelu = Tensor::empty({N, O}, DType::F32);
  ops::linear_forward(y_res, x, w, b, Activation::None, nullptr, &res);
  ops::linear_forward(y_gelu, x, w, b, Activation::Gelu, &pre);
  Tensor dx = Tensor::empty({N, I}, DType::F32), dw = Tensor::empty({O, I}, DType::F32),
         db = Tensor::empty({O}, DType::F32);
  ops::linear_backward_input(dx, dy, w, false);
  ops::linear_backward_weight(dw, &db, dy, x, false);
  const Tensor dx_acc = host_sum(dx, dx0), dw_acc = host_sum(dw, dw0), db_acc = host_sum(db, db0);

  const DType bf = DType::BF16;
  Tensor gx = upload(x, bf), gw = upload(w, bf), gdy = upload(dy, bf);
  Tensor gy = poisoned({N, O}, bf), gres = upload(res, bf);
  ops::linear_forward(gy, gx, gw, upload(b, bf), Activation::None, nullptr, &gres);
  EXPECT_LE(close_error(gy, y_res), kTolBF16) << "residual into y";
  EXPECT_EQ(close_error(gres, res), 0.0) << "the residual must not change";
  Tensor g_alias = upload(res, bf);
  ops::linear_forward(g_alias, gx, gw, upload(b, bf), Activation::None, nullptr, &g_alias);
  EXPECT_LE(close_error(g_alias, y_res), kTolBF16) << "residual in place";
  Tensor gyg = poisoned({N, O}, bf), gpre = poisoned({N, O}, bf);
  ops::linear_forward(gyg, gx, gw, upload(b, bf), Activation::Gelu, &gpre);
  EXPECT_LE(close_error(gyg, y_gelu), kTolBF16) << "GELU y";
  EXPECT_LE(close_error(gpre, pre), kTolBF16) << "GELU pre_act";
  Tensor gdx = upload(dx0, bf);
  ops::linear_backward_input(gdx, gdy, gw, true);
  EXPECT_LE(close_error(gdx, dx_acc), kTolBF16) << "dx accumulated (bf16)";
  Tensor gdw = upload(dw0, DType::F32), gdb = upload(db0, DType::F32);
  ops::linear_backward_weight(gdw, &gdb, gdy, gx, true);
  EXPECT_LE(close_error(gdw, dw_acc), kTolBF16) << "dw accumulated (fp32 from bf16)";
  EXPECT_LE(close_error(gdb, db_acc), kTolBF16) << "db accumulated (fp32 from bf16)";
  Tensor gdw16 = upload(dw0, bf), gdb16 = upload(db0, bf);
  ops::linear_backward_weight(gdw16, &gdb16, gdy, gx, true);
  EXPECT_LE(close_error(gdw16, dw_acc), kTolBF16) << "dw accumulated (bf16)";
  EXPECT_LE(close_error(gdb16, db_acc), kTolBF16) << "db accumulated (bf16)";
  // The same problems again (now cached): the same results.
  Tensor gdw2 = upload(dw0, DType::F32), gdb2 = upload(db0, DType::F32);
  ops::linear_backward_weight(gdw2, &gdb2, gdy, gx, true);
  EXPECT_EQ(close_error(download(gdw2), download(gdw)), 0.0) << "a cached problem repeats its bits";
}

TEST(GpuLinear, TuningNeverWritesTheCallersOutputs) {
  TETRA_REQUIRE_GPU();
  {
    TuningScope on(cuda::GemmTuning::On);
    check_tuning_leaves_outputs(1000, 320, 448, 401);
  }
  {
    TuningScope verbose(cuda::GemmTuning::Verbose);
    check_tuning_leaves_outputs(520, 192, 264, 402);
  }
  {
    TuningScope off(cuda::GemmTuning::Off);
    check_tuning_leaves_outputs(776, 136, 200, 403);
  }
}

// A GEMM seen first while its stream is captured into a CUDA graph runs untuned (tuning would
// synchronise the stream, which a capture forbids); the graph replays correctly, and the problem
// is tuned at its next ordinary call.
TEST(GpuLinear, GraphCaptureSkipsTuning) {
  TETRA_REQUIRE_GPU();
  TuningScope on(cuda::GemmTuning::On);
  Rng rng(404);
  const int64_t N = 600, I = 328, O = 232;  // a problem no other test uses
  Tensor x = rand_bf16(rng, {N, I}, 1.0), w = rand_bf16(rng, {O, I}, 1.0 / std::sqrt(static_cast<double>(I)));
  Tensor b = rand_bf16(rng, {O}, 0.5), res = rand_bf16(rng, {N, O}, 1.0);
  Tensor ref = Tensor::empty({N, O}, DType::F32);
  ops::linear_forward(ref, x, w, b, Activation::None, nullptr, &res);

  Stream stream = Stream::create(gpu());
  StreamGuard guard(stream);
  Tensor gx = upload(x, DType::BF16), gw = upload(w, DType::BF16), gb = upload(b, DType::BF16);
  Tensor gres = upload(res, DType::BF16), gy = poisoned({N, O}, DType::BF16);
  {  // warm-up of this stream (its cuBLASLt workspace) with another problem, outside the capture
    Tensor wx = upload(rand_bf16(rng, {16, I}, 1.0), DType::BF16), wy = poisoned({16, O}, DType::BF16);
    ops::linear_forward(wy, wx, gw, gb);
    stream.synchronize();
  }
  auto s = static_cast<cudaStream_t>(stream.handle());
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ops::linear_forward(gy, gx, gw, gb, Activation::None, nullptr, &gres);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess) << "the capture was invalidated";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  stream.synchronize();
  EXPECT_LE(close_error(gy, ref), kTolBF16) << "the captured GEMM";
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);

  Tensor gy2 = poisoned({N, O}, DType::BF16);
  ops::linear_forward(gy2, gx, gw, gb, Activation::None, nullptr, &gres);  // tuned now
  stream.synchronize();
  EXPECT_LE(close_error(gy2, ref), kTolBF16) << "the same GEMM after the capture";
}

TEST(GpuLinear, RejectsBadArguments) {
  TETRA_REQUIRE_GPU();
  Tensor x = Tensor::empty({4, 8}, DType::F32, gpu());
  Tensor w = Tensor::empty({6, 8}, DType::BF16, gpu());
  Tensor y = Tensor::empty({4, 6}, DType::F32, gpu());
  EXPECT_THROW(ops::linear_forward(y, x, w, Tensor(), Activation::None), Error);  // x and w dtypes differ
  Tensor w32 = Tensor::empty({6, 7}, DType::F32, gpu());
  EXPECT_THROW(ops::linear_forward(y, x, w32, Tensor(), Activation::None), Error);  // I mismatch
  Tensor wf = Tensor::empty({6, 8}, DType::F32, gpu()), res = Tensor::empty({4, 6}, DType::F32, gpu());
  Tensor res16 = Tensor::empty({4, 6}, DType::BF16, gpu()), pre = Tensor::empty({4, 6}, DType::F32, gpu());
  EXPECT_THROW(ops::linear_forward(y, x, wf, Tensor(), Activation::Gelu, nullptr, &res), Error);  // not None
  EXPECT_THROW(ops::linear_forward(y, x, wf, Tensor(), Activation::None, &pre, &res), Error);     // with pre_act
  EXPECT_THROW(ops::linear_forward(y, x, wf, Tensor(), Activation::None, nullptr, &res16), Error);  // dtype
  Tensor buf = Tensor::empty({30}, DType::F32, gpu());
  Tensor y_win = buf.slice_flat(0, {4, 6}), res_win = buf.slice_flat(2, {4, 6});
  EXPECT_THROW(ops::linear_forward(y_win, x, wf, Tensor(), Activation::None, nullptr, &res_win), Error);  // overlap
}

}  // namespace
}  // namespace tetra::gputest
