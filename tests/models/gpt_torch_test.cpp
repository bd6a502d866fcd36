// The whole GPT-2 against an independent PyTorch implementation (float64) from the same weights:
// loss and every parameter gradient to 1e-5 relative, then 10 AdamW steps (warmup + cosine,
// clipping, weight decay) through `tetra train` to 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "models/consolidated.h"
#include "models/gpt_model.h"
#include "parallel/param_set.h"
#include "runtime/hdf5_file.h"
#include "runtime/ops.h"
#include "tests/models/torch_reference_test.h"

namespace fs = std::filesystem;
using namespace tetra;
using tetra::torchref::rel_err;

namespace {

const fs::path& reference_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("tetra_gpt_ref_" + std::to_string(::getpid()));
    std::string cmd = std::string(TETRA_PYTHON) + " " + TETRA_SOURCE_DIR + "/tests/models/gpt_torch_reference.py " +
                      d.string() + " > " + (d.string() + ".log") + " 2>&1";
    int rc = std::system(cmd.c_str());
    if (rc != 0) ADD_FAILURE() << "reference script failed: " << cmd;
    return d;
  }();
  return dir;
}

GptConfig tiny_config() {
  GptConfig c{.vocab_size = 96, .max_seq_len = 16, .d_model = 32, .n_layers = 2, .n_heads = 4};
  return c;
}

// One forward and backward of the reference batch (the first global batch: 4 windows of 17 tokens,
// stride 16) through a fresh model with the reference weights. With copy_grads, each gradient passed
// down to the next layer is a copy (a tensor no layer produced, as one received from another
// pipeline stage would be).
struct ReferenceRun {
  std::unique_ptr<GptModel> model;
  std::unique_ptr<ParamSet> params;  // owns the gradients the model's Params point into
  double loss_sum = 0.0;             // Σ of the per-token losses
  int64_t tokens = 0;
};

ReferenceRun run_reference_batch(const GptConfig& cfg, bool copy_grads) {
  const fs::path dir = reference_dir();
  Hdf5File tokens((dir / "tokens.h5").string(), Hdf5File::Mode::Read);
  Tensor all = tokens.read("tokens", DType::I32);
  const int64_t B = 4, T = 16;
  std::vector<int32_t> ids(B * T), tgt(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    ids[i] = all.data<int32_t>()[i];
    tgt[i] = all.data<int32_t>()[i + 1];
  }
  ReferenceRun run;
  run.model = std::make_unique<GptModel>(cfg);
  run.params = std::make_unique<ParamSet>();
  run.params->build(run.model->params(), Device::cpu(), DType::F32, DType::F32);
  auto unexpected = load_consolidated((dir / "weights.h5").string(), *run.model);
  EXPECT_TRUE(unexpected.empty());
  MicroBatchContext ctx(Device::cpu(), DType::F32);
  ctx.batch = B;
  ctx.seq_len = T;
  ctx.ids = Tensor::from_vector(ids, {B, T});
  ctx.targets = Tensor::from_vector(tgt, {B, T});
  ctx.loss_grad_scale = 1.0f / static_cast<float>(B * T);
  run.params->zero_grads();
  auto layers = run.model->layers();
  Tensor x = ctx.ids;
  for (Layer* l : layers) x = l->forward(ctx, x);
  run.loss_sum = ops::sum_to_host(ctx.losses);
  run.tokens = B * T;
  Tensor dy;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (copy_grads && dy.defined()) {
      Tensor copy = Tensor::empty(dy.shape(), dy.dtype());
      ops::copy(copy, dy);
      dy = copy;
    }
    dy = (*it)->backward_input(ctx, dy);
    (*it)->backward_weight(ctx);
  }
  return run;
}

// Every parameter gradient of a run, in the model's parameter order.
std::vector<std::vector<float>> gradients_of(GptModel& model) {
  std::vector<std::vector<float>> grads;
  for (Param* p : model.params()) grads.emplace_back(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
  return grads;
}

}  // namespace

TEST(GptTorch, LossAndEveryGradientMatch) {
  const fs::path dir = reference_dir();
  ReferenceRun run = run_reference_batch(tiny_config(), /*copy_grads=*/false);
  double loss = run.loss_sum / static_cast<double>(run.tokens);

  Hdf5File ref((dir / "ref.h5").string(), Hdf5File::Mode::Read);
  double loss_ref = ref.read("loss0", DType::F64).data<double>()[0];
  EXPECT_NEAR(loss, loss_ref, 1e-5 * std::abs(loss_ref));
  int checked = 0;
  for (Param* p : run.model->params()) {
    Tensor g = ref.read("grad/" + p->name, DType::F64);
    Tensor mine = p->grad;
    if (p->transposed_in_checkpoint) mine = transpose_host(p->grad);
    ASSERT_EQ(mine.shape(), g.shape()) << p->name;
    double e = rel_err(mine.data<float>(), g.data<double>(), g.numel());
    EXPECT_LT(e, 1e-5) << p->name << " relative error " << e;
    ++checked;
  }
  EXPECT_EQ(checked, 2 + 12 * 2 + 2);  // wte, wpe; 12 per block; ln_f weight and bias
}

// Generation with the key/value cache (learned positions from the cached length on) continues the
// reference's prompt as the float64 reference does greedily, token for token.
TEST(GptTorch, GreedyGenerationMatches) {
  ReferenceRun run = run_reference_batch(tiny_config(), /*copy_grads=*/false);
  tetra::torchref::expect_reference_greedy(*run.model, reference_dir());
}

TEST(GptTorch, TenAdamWStepsMatchTheLossCurve) {
  const fs::path dir = reference_dir();
  const fs::path run = dir / "runs";
  std::ofstream(dir / "cfg.yaml") << R"(run: {name: ref, output_dir: )" << run.string() << R"(, seed: 1}
model: {arch: gpt2, vocab_size: 96, seq_len: 16, d_model: 32, n_layers: 2, n_heads: 4, init_from: )"
                                  << (dir / "weights.h5").string() << R"(}
parallel: {dp: 1}
train: {steps: 10, global_batch: 4, micro_batch: 2, device: cpu, precision: fp32, grad_clip: 0.5}
optimizer: {lr: 3.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1, warmup_steps: 3, schedule: cosine, min_lr: 3.0e-4}
data: {train: )" << (dir / "tokens.h5").string() << R"(, shuffle: false}
log: {every: 100}
)";
  std::string cmd = std::string(std::getenv("TETRA_BIN") ? std::getenv("TETRA_BIN") : TETRA_BINARY_DIR "/tetra") +
                    " train " + (dir / "cfg.yaml").string() + " > " + (dir / "train.log").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "see " << (dir / "train.log");
  Hdf5File ref((dir / "ref.h5").string(), Hdf5File::Mode::Read);
  Tensor losses = ref.read("losses", DType::F64), norms = ref.read("grad_norms", DType::F64);
  std::ifstream metrics(run / "ref" / "metrics.jsonl");
  int n = 0;
  for (std::string line; std::getline(metrics, line);) {
    auto j = nlohmann::json::parse(line);
    int64_t step = j["step"];
    ASSERT_GE(step, 1);
    ASSERT_LE(step, 10);
    double want = losses.data<double>()[step - 1], got = j["loss"];
    EXPECT_NEAR(got, want, 1e-4 * std::abs(want)) << "step " << step;
    double want_norm = norms.data<double>()[step - 1], got_norm = j["grad_norm"];
    EXPECT_NEAR(got_norm, want_norm, 1e-4 * std::abs(want_norm)) << "grad norm at step " << step;
    ++n;
  }
  EXPECT_EQ(n, 10);
}

// Activation recomputation changes what is kept, never the result: the loss and every gradient
// with train.recompute mlp and full equal those of none, bit for bit.
TEST(GptRecompute, MlpAndFullGiveTheSameGradients) {
  std::vector<std::vector<float>> grads[3];
  double losses[3];
  const Recompute modes[3] = {Recompute::None, Recompute::Mlp, Recompute::Full};
  for (int m = 0; m < 3; ++m) {
    GptConfig cfg = tiny_config();
    cfg.recompute = modes[m];
    ReferenceRun run = run_reference_batch(cfg, /*copy_grads=*/false);
    losses[m] = run.loss_sum;
    grads[m] = gradients_of(*run.model);
  }
  for (int m = 1; m < 3; ++m) {
    EXPECT_EQ(losses[m], losses[0]) << "mode " << m;
    ASSERT_EQ(grads[m].size(), grads[0].size());
    for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_EQ(grads[m][i], grads[0][i]) << "mode " << m << " param " << i;
  }
}

// A norm backward hands the column sum of the gradient it returns (its projection's bias gradient)
// and its copy in the activation dtype to the layer below; the context gives them only for that
// same tensor.
TEST(MicroBatchContext, HandsCompanionsOnlyToTheirGradient) {
  MicroBatchContext ctx(Device::cpu(), DType::F32);
  Tensor grad = Tensor::zeros({4, 3}, DType::F32), other = Tensor::zeros({4, 3}, DType::F32);
  Tensor sum = Tensor::zeros({3}, DType::F32), rounded = Tensor::zeros({4, 3}, DType::BF16);
  ctx.offer_grad(grad, {sum, rounded, Tensor(), Tensor()});
  EXPECT_FALSE(ctx.take_grad(other).column_sum.defined()) << "another tensor of the same shape";
  EXPECT_FALSE(ctx.take_grad(grad).column_sum.defined()) << "a failed take drops the offer";
  ctx.offer_grad(grad, {sum, rounded, Tensor(), Tensor()});
  EXPECT_FALSE(ctx.take_grad(grad.view({12})).rounded.defined()) << "the same memory seen as another shape";
  ctx.offer_grad(grad, {sum, rounded, Tensor(), Tensor()});
  GradCompanions taken = ctx.take_grad(grad);
  ASSERT_TRUE(taken.column_sum.defined());
  ASSERT_TRUE(taken.rounded.defined());
  EXPECT_EQ(taken.column_sum.data_ptr(), sum.data_ptr());
  EXPECT_EQ(taken.rounded.data_ptr(), rounded.data_ptr());
  EXPECT_FALSE(ctx.take_grad(grad).column_sum.defined()) << "taken once";
  ctx.offer_grad(grad, {sum, Tensor(), Tensor(), Tensor()});
  ctx.clear();
  EXPECT_FALSE(ctx.take_grad(grad).column_sum.defined()) << "cleared with the micro-batch";
}

// The residual stream's tensors: one gradient tensor when the stream has the activation dtype; an
// fp32 gradient and its bf16 copy when it does not, and the copy GEMMs read is the offered one or,
// when none was offered, the gradient rounded now (bf16 round to nearest even).
TEST(MicroBatchContext, StreamGradientsInTheActivationDtype) {
  MicroBatchContext same(Device::cpu(), DType::F32);
  EXPECT_EQ(same.residual_dtype(), DType::F32);
  StreamGradient g = same.stream_gradient({2, 3});
  EXPECT_EQ(g.rounded.data_ptr(), g.grad.data_ptr());
  EXPECT_EQ(g.rounded_output(), nullptr);
  EXPECT_EQ(same.in_activation_dtype(g.grad, Tensor()).data_ptr(), g.grad.data_ptr());

  MicroBatchContext mixed(Device::cpu(), DType::BF16, DType::F32);
  EXPECT_EQ(mixed.residual({2, 3}).dtype(), DType::F32);
  StreamGradient m = mixed.stream_gradient({2, 3});
  EXPECT_EQ(m.grad.dtype(), DType::F32);
  EXPECT_EQ(m.rounded.dtype(), DType::BF16);
  EXPECT_EQ(m.rounded_output(), &m.rounded);
  EXPECT_EQ(mixed.in_activation_dtype(m.grad, m.rounded).data_ptr(), m.rounded.data_ptr());
  float* p = m.grad.data<float>();
  const float v[6] = {1.0f, 1.00390625f, 1.01171875f, -3.0e-3f, 1e30f, 0.1f};  // ties round to even
  for (int i = 0; i < 6; ++i) p[i] = v[i];
  Tensor fresh = mixed.in_activation_dtype(m.grad, Tensor());
  ASSERT_EQ(fresh.dtype(), DType::BF16);
  ASSERT_EQ(fresh.shape(), m.grad.shape());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(fresh.bf16_bits()[i], float_to_bf16(v[i])) << i;
}

// Every gradient is the same, bit for bit, when no layer receives a handed-over column sum (each
// gradient passed down is a copy, as one received from another pipeline stage would be): the blocks
// then sum their output gradients themselves.
TEST(MicroBatchContext, GradientsWithoutTheHandedOverSumsAreTheSame) {
  std::vector<std::vector<float>> grads[2];
  double losses[2];
  for (int copy_grads = 0; copy_grads < 2; ++copy_grads) {
    ReferenceRun run = run_reference_batch(tiny_config(), copy_grads == 1);
    losses[copy_grads] = run.loss_sum;
    grads[copy_grads] = gradients_of(*run.model);
  }
  EXPECT_EQ(losses[1], losses[0]);
  ASSERT_EQ(grads[1].size(), grads[0].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_EQ(grads[1][i], grads[0][i]) << "param " << i;
}
