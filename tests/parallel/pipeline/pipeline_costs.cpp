// Pipeline stage costs, measured (a program, not a test): cuts CONFIG's model into the stages of
// its pipeline (parallel.pp, parallel.schedule, parallel.stage_layers — as `tetra plan` and
// `tetra train` cut it) and times, on this process's device (train.device; one GPU or the CPU), the
// forward F, the full backward B, its input part (B-input) and its weight part W of every stage for
// one micro-batch of train.micro_batch × train.seq_len tokens. Prints one JSON line with the
// per-stage milliseconds (medians over the repetitions) and, as its "costs" field, the same in
// `tetra plan --costs` syntax (docs/pipeline.md), so the simulator can replay the schedules with
// them:
//
//   tetra_pipeline_costs CONFIG [--set key=value ...] [--reps R]
//   tetra plan CONFIG --world N --json --costs "$(tetra_pipeline_costs CONFIG | jq -r .costs)"
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/config/config.h"
#include "launch/config/model.h"
#include "launch/train/pipeline_plan.h"
#include "models/model.h"
#include "parallel/param_set.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_split.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "runtime/stream.h"

namespace tetra {
namespace {

// Times fn() `reps` times after one warm-up: device time between events on a GPU, host time on
// the CPU (where ops run as they are issued). Returns the median in milliseconds.
double median_ms(Device device, int reps, const std::function<void()>& setup, const std::function<void()>& fn) {
  std::vector<double> ms;
  for (int r = 0; r <= reps; ++r) {
    setup();
    Event a(device), b(device);
    a.record_timing(current_stream(device));
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    b.record_timing(current_stream(device));
    const double host = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double t = device.is_cuda() ? b.elapsed_ms(a) : host;
    if (r > 0) ms.push_back(t);  // the first one warms up (autotuning, allocation)
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

Tensor random_tokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed, Device device) {
  Tensor host = Tensor::empty({b, t}, DType::I32);
  for (int64_t i = 0; i < b * t; ++i)
    host.data<int32_t>()[i] = static_cast<int32_t>((static_cast<uint64_t>(i) * 2654435761ull + seed * 40503ull) %
                                                   static_cast<uint64_t>(vocab));
  Tensor d = Tensor::empty({b, t}, DType::I32, device);
  ops::copy(d, host);
  return d;
}

Tensor random_activation(int64_t n, int64_t c, DType dt, uint64_t seed, Device device) {
  Tensor host = Tensor::empty({n, c}, DType::F32);
  for (int64_t i = 0; i < n * c; ++i) host.data<float>()[i] = static_cast<float>(normal_at(seed, static_cast<uint64_t>(i)));
  Tensor d = Tensor::empty({n, c}, dt, device);
  ops::copy(d, host);
  return d;
}

int run(int argc, char** argv) {
  CLI::App app{"tetra_pipeline_costs: F, B and W of every pipeline stage of a config, measured on one device"};
  std::string config_path;
  std::vector<std::string> overrides;
  int reps = 10;
  app.add_option("config", config_path, "experiment config (YAML)")->required();
  app.add_option("--set", overrides, "override a config key (repeatable)");
  app.add_option("--reps", reps, "timed repetitions per measurement (median)")->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  using namespace launch;
  // One data-parallel replica of the pipeline is measured; the config's world is pp · tp · dp.
  const Config given = load_config(config_path, overrides);
  const int world = given.parallel.pp * given.parallel.tp * std::max(1, given.parallel.dp);
  Config cfg = resolve(given, world, cuda_available());
  const Device device = cfg.resolved.device == DeviceKind::CUDA ? Device::cuda(0) : Device::cpu();
  const DType act = cfg.resolved.activation_dtype;
  const PipelinePlan plan = plan_pipeline(cfg);
  std::unique_ptr<Model> model = model_family_of(cfg).build(model_args(cfg));
  ParamSet params;
  params.build(model->params(), device, act, DType::F32);
  params.initialize(static_cast<uint64_t>(cfg.run.seed));
  const std::vector<Layer*> layers = model->layers();
  const int64_t B = cfg.train.micro_batch, T = cfg.train.seq_len, C = cfg.model.d_model, N = B * T;
  const Tensor ids = random_tokens(B, T, cfg.model.vocab_size, 1, device);
  const Tensor targets = random_tokens(B, T, cfg.model.vocab_size, 2, device);
  const Tensor x_in = random_activation(N, C, act, 3, device);
  const Tensor dy_in = random_activation(N, C, act, 4, device);

  const int stages = plan.schedule.layout.stages();
  std::vector<double> f_ms, b_ms, bi_ms, w_ms;
  for (int s = 0; s < stages; ++s) {
    std::vector<Layer*> stage;
    for (int i : stage_layer_indices(plan.stage_layers, s)) stage.push_back(layers[static_cast<size_t>(i)]);
    const bool first = s == 0, last = s == stages - 1;
    std::unique_ptr<MicroBatchContext> ctx;
    auto fresh = [&] {
      ctx = std::make_unique<MicroBatchContext>(device, act);
      ctx->batch = B;
      ctx->seq_len = T;
      ctx->ids = ids;
      ctx->targets = targets;
      ctx->loss_grad_scale = 1.0f / static_cast<float>(N);
    };
    auto forward = [&] {
      Tensor x = first ? ctx->ids : x_in;
      for (Layer* l : stage) x = l->forward(*ctx, x);
    };
    auto backward_input = [&] {
      Tensor g = last ? Tensor() : dy_in;
      for (auto it = stage.rbegin(); it != stage.rend(); ++it) g = (*it)->backward_input(*ctx, g);
    };
    auto weight = [&] {
      for (auto it = stage.rbegin(); it != stage.rend(); ++it) (*it)->backward_weight(*ctx);
    };
    auto full = [&] {
      Tensor g = last ? Tensor() : dy_in;
      for (auto it = stage.rbegin(); it != stage.rend(); ++it) {
        g = (*it)->backward_input(*ctx, g);
        (*it)->backward_weight(*ctx);
      }
    };
    f_ms.push_back(median_ms(device, reps, fresh, forward));
    b_ms.push_back(median_ms(device, reps, [&] { fresh(); forward(); }, full));
    bi_ms.push_back(median_ms(device, reps, [&] { fresh(); forward(); }, backward_input));
    w_ms.push_back(median_ms(device, reps, [&] { fresh(); forward(); backward_input(); }, weight));
    device_synchronize(device);
  }
  PipelineCosts costs;
  costs.f = f_ms;
  costs.b = b_ms;
  costs.w.clear();
  // W as measured, but within B (B-input = B − W is what the simulator charges a split backward).
  for (int s = 0; s < stages; ++s) costs.w.push_back(std::min(w_ms[static_cast<size_t>(s)], b_ms[static_cast<size_t>(s)]));
  costs.p2p = 0;
  nlohmann::ordered_json j = {{"config", config_path},
                              {"device", device.str()},
                              {"precision", dtype_name(act)},
                              {"schedule", choice_name(cfg.parallel.schedule)},
                              {"pp", cfg.parallel.pp},
                              {"stages", stages},
                              {"stage_layers", plan.stage_layers},
                              {"tokens", N},
                              {"F_ms", f_ms},
                              {"B_ms", b_ms},
                              {"B_input_ms", bi_ms},
                              {"W_ms", w_ms},
                              {"costs", costs.to_string()}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace tetra

int main(int argc, char** argv) {
  try {
    return tetra::run(argc, argv);
  } catch (const tetra::Error& e) {
    std::fprintf(stderr, "tetra_pipeline_costs: error: %s\n", e.what());
    return e.kind() == tetra::ErrorKind::Config || e.kind() == tetra::ErrorKind::Usage ? 2 : 1;
  }
}
