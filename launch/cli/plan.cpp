// `tetra plan CONFIG --world N`: the mesh, every rank's groups, per-device memory by category and
// the pipeline — its stage split, every pipeline rank's schedule and the simulated step — computed
// from the config alone (no GPU, no data). The memory is exact for the training state (the ZeRO
// layout of the parameters a pipeline rank holds, padding included) and an estimate for the
// activations (one micro-batch's per stage, times the schedule's peak). --print-schedule and
// --json print machine-readable forms of the pipeline instead (docs/pipeline.md).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <ranges>

#include "launch/cli/commands.h"
#include "launch/config/config.h"
#include "launch/train/memory_plan.h"
#include "launch/config/model.h"
#include "launch/train/pipeline_plan.h"
#include "models/parallelize.h"
#include "parallel/mesh.h"
#include "parallel/param_placement.h"
#include "runtime/error.h"
#include "runtime/text_join.h"

namespace tetra::launch {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string stage_list(const PipelineLayout& l, int rank) {
  return join_text(std::views::iota(0, l.chunks()), ",", [&](int c) { return std::to_string(l.stage_of(rank, c)); });
}

// A group of ranks, compact at any world size: an arithmetic progression of three or more reads
// "0..127" (step 1) or "0,128..1920", anything else is listed ("[0,1,4,5]").
std::string group_text(const std::vector<int>& g) {
  const size_t n = g.size();
  bool progression = n >= 3 && g[1] > g[0];
  for (size_t i = 2; progression && i < n; ++i) progression = g[i] - g[i - 1] == g[1] - g[0];
  std::string s = "[";
  if (progression) {
    s += std::to_string(g[0]);
    if (g[1] - g[0] != 1) (s += ',') += std::to_string(g[1]);
    s += "..";
    s += std::to_string(g[n - 1]);
  } else {
    s += join_text(g, ",");
  }
  return s + "]";
}

// Keys in the order the docs give them (nlohmann::json would sort them).
nlohmann::ordered_json pipeline_json(const Config& cfg, const PipelinePlan& p) {
  const PipelineSimulation& sim = p.sim;
  return {{"schedule", choice_name(cfg.parallel.schedule)},
          {"pp", cfg.parallel.pp},
          {"stages", p.schedule.layout.stages()},
          {"stage_layers", p.stage_layers},
          {"micro_batches", cfg.parallel.micro_batches},
          {"costs", p.costs.to_string()},
          {"costs_from", p.costs_from_model ? "model_flops" : "given"},
          {"makespan", sim.makespan},
          {"bubble", sim.bubble},
          {"bubble_fraction", sim.bubble_fraction},
          {"busy", sim.busy},
          {"peak_activations", sim.peak_activations},
          {"peak_activation_bytes", p.peak_activation_bytes}};
}

// The mesh and every rank's groups along each axis.
void print_mesh(const MeshShape& shape, int world) {
  std::printf("mesh: world %d = pp %d × dp %d × tp %d (ep %d inside dp)\n", world, shape.pp, shape.dp, shape.tp,
              shape.ep);
  for (int r = 0; r < world; ++r) {
    Mesh mesh(shape, r);
    const MeshCoords& c = mesh.coords();
    std::printf("rank %d: pp %d dp %d tp %d ep %d | ", r, c.pp, c.dp, c.tp, c.ep);
    for (MeshAxis a : {MeshAxis::TP, MeshAxis::DP, MeshAxis::PP, MeshAxis::EP, MeshAxis::ExpertDP}) {
      std::printf("%s %s ", axis_name(a), group_text(mesh.group(a, r)).c_str());
    }
    std::printf("\n");
  }
}

// The model's size, FLOPs and, with experts, how they are spread.
void print_model(const Config& cfg, const ModelFamily& family, const ModelArgs& args, const MeshShape& shape) {
  const ParamCount count = family.param_count(args);
  std::printf("model: %s\n", family.describe(args).c_str());
  std::printf("  %.1fM parameters", static_cast<double>(count.total) / 1e6);
  if (count.active != count.total) std::printf(" (%.1fM active per token)", static_cast<double>(count.active) / 1e6);
  std::printf(", %.3g FLOP/token at context %d\n", family.flops_per_token(args, cfg.train.seq_len), cfg.train.seq_len);
  if (cfg.model.moe.n_experts > 0)
    std::printf("  experts: %d per MoE layer, %d on each rank of an expert-parallel group of %d; their gradients "
                "reduced (and ZeRO-sharded) over expert-data groups of %d ranks, the rest over dp %d\n",
                static_cast<int>(cfg.model.moe.n_experts), static_cast<int>(cfg.model.moe.n_experts / shape.ep),
                shape.ep, shape.dp / shape.ep, shape.dp);
}

// What tensor parallelism saves on the largest pipeline rank `big` (whose plan is `largest` and
// parameters `big_params`), the blocks several tp ranks hold, and the traffic it costs.
void print_tensor_parallel(const Config& cfg, const ModelFamily& family, const ModelArgs& args,
                           const TensorParallelPlan& tp_plan, const PipelinePlan& pipe, int big,
                           const std::vector<Param*>& big_params, const MemoryPlan& largest, const MeshShape& shape) {
  const bool sp = cfg.parallel.sequence_parallel;
  // The same rank without tensor parallelism (tp 1 at this dp and stage): what the split saves.
  Config one = cfg;
  one.parallel.tp = 1;
  std::unique_ptr<Model> whole = family.build(args);
  parallelize(*whole, family, args, {1, 0, sp, nullptr, shape.ep, nullptr});
  const MemoryPlan base = plan_memory(one, pipeline_rank_params(pipe, big, whole->params()), shape.dp);
  auto state = [](const MemoryPlan& p) { return p.state.weights + p.state.gradients + p.state.optimizer; };
  std::printf("  tensor parallel: tp %d holds %.1fM of the parameters per device; weights + gradients + optimizer "
              "state %.3f GiB = %.1f%% of tp 1's %.3f GiB (same dp and stage)\n",
              shape.tp, static_cast<double>(largest.params) / 1e6, state(largest) / kGiB,
              100.0 * state(largest) / state(base), state(base) / kGiB);
  // Blocks several tp ranks hold (parts of fewer units than tp ranks: key/value heads when tp is
  // above their count) are counted in full on each of them, above.
  std::map<int, int64_t> replicated;  // replicas -> elements of one device
  for (Param* p : big_params)
    for (const ReplicaRange& r : replica_ranges(*p)) replicated[r.replicas] += r.end - r.begin;
  for (const auto& [r, n] : replicated)
    std::printf("  tensor parallel: %lld of them in blocks held by %d tp ranks each (parameter parts of fewer "
                "units than tp ranks: key/value heads), their gradients summed over those %d ranks\n",
                static_cast<long long>(n), r, r);
  const TpTraffic t = tensor_parallel_traffic(tp_plan, *whole, static_cast<int64_t>(cfg.train.micro_batch) *
                                                                   cfg.train.seq_len,
                                              shape.tp, sp, static_cast<int>(dtype_size(cfg.resolved.activation_dtype)),
                                              largest.grad_dtype == "bf16" ? 2 : 4, cfg.train.recompute == Recompute::Full);
  const double mib = 1024.0 * 1024.0;
  const int accum = optimizer_options(cfg, shape.dp).accumulation_steps;
  std::printf("  tensor-parallel communication per device (sent, ring collectives; every layer of the model), "
              "sequence parallelism %s:\n",
              sp ? "on" : "off");
  std::printf("    per micro-batch: %d all-gathers %.1f MiB, %d reduce-scatters %.1f MiB, %d all-reduces %.1f MiB\n",
              t.all_gathers, t.all_gather_bytes / mib, t.reduce_scatters, t.reduce_scatter_bytes / mib,
              t.all_reduces, t.all_reduce_bytes / mib);
  std::printf("    per step (%d micro-batch(es)): %.1f MiB, and %.2f MiB of sequence-parallel and replicated gradients all-reduced\n",
              accum, accum * t.micro_batch_bytes() / mib, t.step_all_reduce_bytes / mib);
  std::printf("    each collective runs whole, not overlapped with the GEMMs%s\n",
              cfg.train.recompute == Recompute::Mlp ? "; recompute mlp gathers each MLP input again (not counted)" : "");
}

// Every ZeRO stage side by side for the parameters `big_params`, so the effect of
// parallel.zero_stage is visible at a glance.
void print_by_zero_stage(const Config& cfg, const std::vector<Param*>& big_params, const MemoryPlan& largest, int dp) {
  std::printf("  by zero_stage (GiB)   parameters  gradients  optimizer  activations  communication    total\n");
  for (int stage = 0; stage <= 3; ++stage) {
    Config c = cfg;
    c.parallel.zero_stage = stage;
    MemoryPlan p = plan_memory(c, big_params, dp);
    p.activations = largest.activations;
    std::printf("  %s stage %d        %10.3f %10.3f %10.3f %12.3f %14.3f %8.3f\n", stage == cfg.parallel.zero_stage ? "*" : " ",
                stage, p.state.weights / kGiB, p.state.gradients / kGiB, p.state.optimizer / kGiB, p.activations / kGiB,
                p.state.communication / kGiB, p.total() / kGiB);
  }
}

// The stage split, the simulated step and each pipeline rank's schedule and memory (per_rank).
void print_pipeline(const Config& cfg, const PipelinePlan& pipe, const std::vector<MemoryPlan>& per_rank, int pp,
                    const std::string& trace) {
  const PipelineSimulation& sim = pipe.sim;
  if (pp == 1) {
    std::printf("pipeline: pp 1, one stage, %d micro-batches per step: no bubble (0.0%%)\n", cfg.parallel.micro_batches);
    return;
  }
  std::printf("pipeline: pp %d, schedule %s, %d stages of %s layers (%s), %d micro-batches per step\n", pp,
              choice_name(cfg.parallel.schedule), pipe.schedule.layout.stages(), bracketed_text(pipe.stage_layers, ", ").c_str(),
              pipe.split_by_cost ? "split by forward FLOPs, embedding and output layer counted"
                                 : "parallel.stage_layers",
              cfg.parallel.micro_batches);
  std::printf("  simulated step: makespan %.4g, bubble %.4g (%.1f%%); costs per stage and micro-batch %s\n", sim.makespan,
              sim.bubble, 100.0 * sim.bubble_fraction, pipe.costs.to_string().c_str());
  std::printf("  (%s; docs/pipeline.md)\n", pipe.costs_from_model
                                                ? "from the model's FLOPs, in units of its forward / pp; --costs sets them"
                                                : "as given by --costs");
  std::printf("  rank  stages    compute     idle  peak act.  activations GiB  state GiB  total GiB\n");
  for (int r = 0; r < pp; ++r) {
    const MemoryPlan& m = per_rank[static_cast<size_t>(r)];
    std::printf("  %4d  %-8s %8.4g %8.4g %10d %16.3f %10.3f %10.3f\n", r, stage_list(pipe.schedule.layout, r).c_str(),
                sim.busy[static_cast<size_t>(r)], sim.makespan - sim.busy[static_cast<size_t>(r)],
                sim.peak_activations[static_cast<size_t>(r)], m.activations / kGiB, m.state.total() / kGiB,
                m.total() / kGiB);
  }
  if (!trace.empty()) std::printf("  simulated timeline: %s (Chrome trace; open it in Perfetto)\n", trace.c_str());
}

}  // namespace

int plan_command(const std::string& config_path, const std::vector<std::string>& overrides, const PlanOptions& o) {
  if (o.print_schedule && o.json) TETRA_FAIL(Usage, "tetra plan: --print-schedule and --json print different things; choose one");
  print_plan(resolve(load_config(config_path, overrides), o.world, /*cuda_available=*/true), o);
  return 0;
}

void print_plan(const Config& cfg, const PlanOptions& o) {
  const int world = o.world;
  MeshShape shape;
  shape.dp = cfg.resolved.dp;
  shape.tp = cfg.parallel.tp;
  shape.pp = cfg.parallel.pp;
  shape.ep = cfg.parallel.ep;
  const PipelinePlan pipe = plan_pipeline(cfg, o.costs);
  if (!o.trace.empty()) {
    std::ofstream out(o.trace);
    out << chrome_trace(pipe.schedule, pipe.sim).dump() << "\n";
    if (!out) TETRA_FAIL(Usage, "--trace ", o.trace, ": cannot write the file");
  }

  if (o.print_schedule) {
    for (int r = 0; r < shape.pp; ++r)
      std::printf("%s\n", nlohmann::ordered_json{{"rank", r}, {"ops", pipe.schedule.compute_ops(r)}}.dump().c_str());
    return;
  }
  if (o.json) {
    nlohmann::ordered_json j = {{"world", world},
                        {"mesh", {{"pp", shape.pp}, {"dp", shape.dp}, {"tp", shape.tp}, {"ep", shape.ep}}},
                        {"pipeline", pipeline_json(cfg, pipe)}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  print_mesh(shape, world);

  // Memory from the exact flat layout of the parameters each pipeline rank holds (no tensor is
  // allocated: the model's Params carry shapes only until a ParamSet is built), each placed on tp
  // rank 0 as the family's tensor-parallel plan says (every tp rank holds the same sizes);
  // activations from the schedule's peak of one micro-batch's per stage (on one tp rank), plus one
  // layer's backward working set.
  const ModelFamily& family = model_family_of(cfg);
  const ModelArgs args = model_args(cfg);
  std::unique_ptr<Model> model = family.build(args);
  const TensorParallelPlan tp_plan = shape.tp > 1 ? family.tensor_parallel_plan(args) : TensorParallelPlan{};
  parallelize(*model, family, args, {shape.tp, 0, cfg.parallel.sequence_parallel, nullptr, shape.ep, nullptr});
  const std::vector<Param*> all = model->params();
  print_model(cfg, family, args, shape);
  std::vector<MemoryPlan> per_rank;
  for (int r = 0; r < shape.pp; ++r) per_rank.push_back(pipeline_memory_plan(cfg, pipe, r, all, shape.dp));
  const auto largest = std::max_element(per_rank.begin(), per_rank.end(),
                                        [](const MemoryPlan& a, const MemoryPlan& b) { return a.total() < b.total(); });
  const int big = static_cast<int>(largest - per_rank.begin());
  const std::vector<Param*> big_params = pipeline_rank_params(pipe, big, all);
  if (shape.pp > 1) std::printf("  (memory of pipeline rank %d, the largest; every rank below under pipeline)\n", big);
  print_memory_plan(stdout, *largest);
  std::printf("  (activations: micro-batch %d × %d tokens, recompute %s, %s residual stream, %d held at the peak;\n"
              "   communication and per-layer gradient buffers are bounds at fsdp_prefetch %d, %d micro-batch(es) per\n"
              "   step; docs/zero.md)\n",
              cfg.train.micro_batch, cfg.train.seq_len, choice_name(cfg.train.recompute),
              dtype_name(cfg.resolved.residual_dtype),
              pipe.sim.peak_activations[static_cast<size_t>(big)], cfg.parallel.fsdp_prefetch,
              optimizer_options(cfg, shape.dp).accumulation_steps);
  if (shape.tp > 1) print_tensor_parallel(cfg, family, args, tp_plan, pipe, big, big_params, *largest, shape);
  print_by_zero_stage(cfg, big_params, *largest, shape.dp);
  print_pipeline(cfg, pipe, per_rank, shape.pp, o.trace);
}

}  // namespace tetra::launch
