// Every ZeRO stage reproduces the single-rank run (run under mpirun with 2 or 4 ranks, CPU):
// the Trainer at dp = world with zero_stage 0–3, gradient accumulation (2–4 micro-batches, and
// one variant with a single one) and clipping active, against the same config trained by one
// process alone (a different micro-batch split). Checked per step: loss, gradient norm, val loss
// (evaluation runs stage 3's forward-only path) to 1e-6 relative; at the end (1e-5 norm-wise per
// parameter): fp32 master,
// exp_avg and exp_avg_sq of every element and the working weights (stage 3: gathered layer by
// layer through the hooks); that the ranks' checkpoint pieces cover each parameter exactly once;
// and that the gradient and gathered-weight buffers stayed within the bounds the memory plan uses.
// Stages 0–3 again with optimizer.state_dtype bf16, against the single-rank run with bf16 moments.
// And one rank alone at stages 1 and 2 (the optimizer on the flat buffers) against that at stage 0.
//
// usage: mpirun -np N zero_equivalence_test WORK_DIR [gpt2|llama]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "parallel/zero/memory.h"
#include "parallel/zero/optimizer.h"
#include "tests/parallel/trainer_equivalence.h"

namespace fs = std::filesystem;
using namespace tetra;
using namespace tetra::launch;
using namespace tetra::equivalence;

namespace {

struct Variant {
  std::string name;
  int stage = 0;
  int micro_batch = 1;
  int prefetch = 1;
  bool overlap = true;
  bool bf16_state = false;  // optimizer.state_dtype bf16, compared with the bf16-state reference
};

// The equivalence tests' scheme (tests/tetra_runs.py, docs/testing.md "Tolerances"): optimizer.eps
// 1e-3 bounds AdamW's sensitivity to a gradient by lr/eps = 3 (with 1e-8, the rounding noise of the
// key third of c_attn.bias, whose gradient is zero in exact arithmetic, became lr-sized steps), and
// the limits sit ~100× above what a correct run reaches against itself with only its micro-batch
// split changed. A sharding bug shows as O(1e-2 … 1) anywhere.
constexpr double kTol = 1e-6;       // per-step loss, gradient norm, val loss
constexpr double kStateTol = 1e-5;  // final state, ‖a − ref‖ / ‖ref‖ per parameter
constexpr double kClip = 0.5;
// bf16 moments (optimizer.state_dtype), against the single-rank bf16-state run. The micro-batch
// split moves an fp32 moment by ~1e-7 relative; where that crosses a bf16 rounding boundary the
// stored moment differs by one bf16 ulp (2^-8 relative), and the next steps carry it on. Measured
// (gpt2 and llama, dp 2 and 4, every stage): per-step loss ≤ 6e-8, gradient norm ≤ 6e-7; final
// moments ≤ 1.2e-3 and weights ≤ 6.2e-5 norm-wise. Limits: 1e-5 per step, 2^-8 (one bf16 ulp on
// every element) for the final state, 1e-3 for the weights (on the CPU the fp32 master itself) —
// below the O(1e-2 … 1) of a sharding bug.
constexpr double kBf16StepTol = 1e-5;
constexpr double kBf16MomentTol = 0.00390625;
constexpr double kBf16WeightTol = 1e-3;

std::string config_yaml(const std::string& work, const std::string& data, const std::string& arch) {
  std::ostringstream os;
  os << "run: {name: base, output_dir: " << work << "/runs, seed: 11}\n"
     << (arch == "llama"
             ? "model: {arch: llama, vocab_size: 256, seq_len: 32, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, "
               "ffn_dim: 64}\n"
             : "model: {arch: gpt2, vocab_size: 256, seq_len: 32, d_model: 32, n_layers: 2, n_heads: 2}\n")
     << "train: {steps: 10, global_batch: 8, micro_batch: 8, device: cpu, precision: fp32, grad_clip: " << kClip
     << ", eval_every: 5, eval_batches: 1}\n"
     << "optimizer: {lr: 3.0e-3, betas: [0.9, 0.95], eps: 1.0e-3, weight_decay: 0.1, warmup_steps: 2, "
        "schedule: cosine, "
        "min_lr: 1.0e-4}\n"
     << "data: {train: " << data << ", val: " << data << ", shuffle: true}\n"
     << "log: {every: 100}\n";
  return os.str();
}

// Σ (a − ref)² and Σ ref² over a slice of a parameter: norm-wise relative errors are formed per
// parameter once the sums of all ranks' pieces are in.
void accumulate_error(const float* a, const std::vector<float>& ref, int64_t begin, int64_t n, double* num,
                      double* den) {
  for (int64_t i = 0; i < n; ++i) {
    const double r = ref[static_cast<size_t>(begin + i)], d = static_cast<double>(a[i]) - r;
    *num += d * d;
    *den += r * r;
  }
}

// ‖a − ref‖ / ‖ref‖ of every parameter (entries i and i mod P: the same parameter) against its
// tolerance; returns the largest error relative to its tolerance's scale and names it in `which`.
double worst_norm_error(const std::vector<double>& num, const std::vector<double>& den,
                        const std::vector<Param*>& params, std::string* which, bool* ok, double tol) {
  double w = 0;
  *ok = true;
  for (size_t i = 0; i < num.size(); ++i) {
    const double e = std::sqrt(num[i] / std::max(den[i], 1e-30));
    const std::string& name = params[i % params.size()]->name;
    if (!(e <= tol)) *ok = false;
    if (e > w) {
      w = e;
      *which = name;
    }
  }
  return w;
}

// Each parameter's place: its index in the layout's order and its first element in a flat count.
struct ParamIndex {
  std::map<std::string, size_t> index;
  std::vector<int64_t> base;
  int64_t total = 0;
};

ParamIndex index_params(const ZeroLayout& layout) {
  ParamIndex pi;
  for (Param* p : layout.params()) {
    pi.index[p->name] = pi.base.size();
    pi.base.push_back(pi.total);
    pi.total += p->numel();
  }
  return pi;
}

// Final optimizer state: every piece this rank saves matches the reference; over the ranks the
// pieces cover every element of every parameter exactly once. Returns the worst norm-wise error.
double check_final_state(MpiCommunicator& world, DistributedOptimizer& opt, const ZeroLayout& layout,
                         const ParamIndex& pi, const Variant& v, const Run& ref, double state_tol) {
  std::vector<int> cover(static_cast<size_t>(pi.total), 0);
  const size_t P = pi.base.size();
  std::vector<double> num(3 * P, 0.0), den(3 * P, 0.0);  // master, exp_avg, exp_avg_sq per parameter
  for (const StatePiece& s : opt.pieces_to_save()) {
    auto it = pi.index.find(s.name);
    if (it == pi.index.end()) {
      fail(v.name + ": piece of unknown parameter " + s.name);
      continue;
    }
    const size_t k = it->second;
    const int64_t n = s.end - s.begin;
    if (s.exp_avg.dtype() != (v.bf16_state ? DType::BF16 : DType::F32))
      fail(v.name + ": exp_avg of " + s.name + " is " + s.exp_avg.describe());
    accumulate_error(s.master.data<float>(), ref.master.at(s.name), s.begin, n, &num[k], &den[k]);
    accumulate_error(host_floats(s.exp_avg).data(), ref.exp_avg.at(s.name), s.begin, n, &num[P + k], &den[P + k]);
    accumulate_error(host_floats(s.exp_avg_sq).data(), ref.exp_avg_sq.at(s.name), s.begin, n, &num[2 * P + k],
                     &den[2 * P + k]);
    for (int64_t e = s.begin; e < s.end; ++e) ++cover[static_cast<size_t>(pi.base[k] + e)];
  }
  MPI_Allreduce(MPI_IN_PLACE, cover.data(), static_cast<int>(cover.size()), MPI_INT, MPI_SUM, world.handle());
  MPI_Allreduce(MPI_IN_PLACE, num.data(), static_cast<int>(num.size()), MPI_DOUBLE, MPI_SUM, world.handle());
  MPI_Allreduce(MPI_IN_PLACE, den.data(), static_cast<int>(den.size()), MPI_DOUBLE, MPI_SUM, world.handle());
  const int64_t bad = std::count_if(cover.begin(), cover.end(), [](int c) { return c != 1; });
  if (bad) fail(v.name + ": " + std::to_string(bad) + " parameter elements not saved by exactly one rank");
  std::string worst_state;
  bool state_ok = true;
  const double ws = worst_norm_error(num, den, layout.params(), &worst_state, &state_ok, state_tol);
  if (!state_ok) fail(v.name + ": final optimizer state differs (worst elsewhere than c_attn.bias: " + std::to_string(ws) + ", " + worst_state + ")");
  return ws;
}

// Final working weights, as the next forward would read them (every rank sees them whole). Returns
// the worst norm-wise error.
double check_working_weights(DistributedOptimizer& opt, const ZeroLayout& layout, const ParamIndex& pi,
                             const Variant& v, const Run& ref, double weight_tol) {
  const size_t P = pi.base.size();
  std::vector<double> wnum(P, 0.0), wden(P, 0.0);
  auto compare_values = [&](int unit) {
    for (int idx : layout.units()[static_cast<size_t>(unit)].params) {
      Param* p = layout.params()[static_cast<size_t>(idx)];
      if (!p->value.defined()) {
        fail(v.name + ": " + p->name + " has no working value during its layer's forward");
        continue;
      }
      const size_t k = pi.index.at(p->name);
      wnum[k] = wden[k] = 0;
      accumulate_error(p->value.data<float>(), ref.master.at(p->name), 0, p->numel(), &wnum[k], &wden[k]);
    }
  };
  // Stages 1–2 leave most of the last update's gathers to the next step: sync_weights() does them
  // as an evaluation would (the per-step losses cover the in-step path).
  opt.sync_weights();
  for (int layer : layout.layers()) {
    opt.before_forward(layer);
    for (int u : layout.units_of_layer(layer)) compare_values(u);
    opt.after_forward(layer);
  }
  std::string worst_weight;
  bool weights_ok = true;
  const double ww = worst_norm_error(wnum, wden, layout.params(), &worst_weight, &weights_ok, weight_tol);
  if (!weights_ok) fail(v.name + ": final working weights differ (worst elsewhere than c_attn.bias: " + std::to_string(ww) + ", " + worst_weight + ")");
  return ww;
}

// Buffers against the bounds the memory plan uses; returns what they reached, for the log line.
std::string check_buffer_bounds(DistributedOptimizer& opt, const ZeroLayout& layout, const Variant& v, int accum) {
  std::string bounds;
  auto* z = dynamic_cast<ZeroOptimizer*>(&opt);
  if (!z) return bounds;
  const int64_t peak_grads = z->reducer().peak_unit_elements();
  if (v.stage >= 2) {
    const bool all = accum > 1 || !v.overlap;
    const int64_t bound = all ? layout.total()
                              : layout.tied_elements() +
                                    layout.largest_units(zero_reduce_scatters_in_flight(v.prefetch) + 1, false);
    if (all ? peak_grads != bound : (peak_grads > bound || peak_grads <= 0))
      fail(v.name + ": per-layer gradient buffers peaked at " + std::to_string(peak_grads) + " elements, bound " +
           std::to_string(bound) + (all ? " (all layers accumulate)" : ""));
    bounds += " grad buffers " + std::to_string(peak_grads) + "/" + std::to_string(layout.total());
  }
  if (const ZeroParamGather* g = z->gather()) {
    const int64_t bound = layout.tied_elements() + layout.largest_units(1 + v.prefetch, false);
    if (g->peak_elements() > bound || g->peak_elements() <= 0)
      fail(v.name + ": gathered weights peaked at " + std::to_string(g->peak_elements()) + " elements, bound " +
           std::to_string(bound));
    bounds += " gathered " + std::to_string(g->peak_elements()) + "/" + std::to_string(bound) + " (" +
              std::to_string(g->gathers_issued()) + " all-gathers)";
  }
  return bounds;
}

void check_variant(MpiCommunicator& world, const std::string& yaml, const std::string& work, const Variant& v,
                   const Run& ref) {
  std::vector<std::string> o = {"parallel.zero_stage=" + std::to_string(v.stage),
                                "train.micro_batch=" + std::to_string(v.micro_batch),
                                "parallel.fsdp_prefetch=" + std::to_string(v.prefetch),
                                std::string("parallel.overlap_grad_reduce=") + (v.overlap ? "true" : "false"),
                                std::string("optimizer.state_dtype=") + (v.bf16_state ? "bf16" : "fp32")};
  const double tol = v.bf16_state ? kBf16StepTol : kTol;
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Trainer> tr = train(world, yaml, v.name, o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  DistributedOptimizer& opt = tr->optimizer();
  const ZeroLayout& layout = tr->params().layout();
  if (opt.zero_stage() != v.stage) fail(v.name + ": optimizer runs stage " + std::to_string(opt.zero_stage()));
  const int accum = 8 / (world.size() * v.micro_batch);

  // Per-step results (every rank computes the same all-reduced loss; rank 0 wrote the metrics).
  Run got;
  got.loss = tr->losses();
  double wl = worst_rel(got.loss, ref.loss, "per-step loss", v.name, tol);
  double wg = 0, wv = 0;
  if (world.rank() == 0) {
    read_metrics(work + "/runs/" + v.name, got);
    wg = worst_rel(got.grad_norm, ref.grad_norm, "gradient norm", v.name, tol);
    wv = worst_rel(got.val_loss, ref.val_loss, "val loss", v.name, tol);
  }
  const ParamIndex pi = index_params(layout);
  const double ws = check_final_state(world, opt, layout, pi, v, ref, v.bf16_state ? kBf16MomentTol : kStateTol);
  const double ww = check_working_weights(opt, layout, pi, v, ref, v.bf16_state ? kBf16WeightTol : kStateTol);
  const std::string bounds = check_buffer_bounds(opt, layout, v, accum);
  if (world.rank() == 0)
    std::printf("[zero] dp %d %-22s accum %d: loss %.1e, grad norm %.1e, val %.1e, state %.1e, weights %.1e |%s | %.1f s\n",
                world.size(), v.name.c_str(), accum, wl, wg, wv, ws, ww, bounds.c_str(), seconds);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  mpi_initialize(&argc, &argv);
  int code = 0;
  {
    auto world = MpiCommunicator::world();
    g_rank = world->rank();
    const int W = world->size();
    if (argc < 2) {
      std::fprintf(stderr, "usage: zero_equivalence_test WORK_DIR [gpt2|llama]\n");
      return 2;
    }
    const std::string arch = argc > 2 ? argv[2] : "gpt2";
    const std::string work = fs::absolute(argv[1]).string();
    try {
      const std::string data = prepare_data(*world, work);
      const std::string yaml = config_yaml(work, data, arch);

      // The reference: one process, all 8 sequences in one micro-batch (each rank computes it alone).
      const Run ref = train_reference(yaml, work, {"train.micro_batch=8"});
      const Run ref_bf16 = train_reference(yaml, work, {"train.micro_batch=8", "optimizer.state_dtype=bf16"}, "bf16");
      {
        const int clipped = static_cast<int>(
            std::count_if(ref.grad_norm.begin(), ref.grad_norm.end(), [](double g) { return g > kClip; }));
        if (clipped == 0) fail("clipping never active in the reference (grad_clip " + std::to_string(kClip) + ")");
        if (ref.val_loss.size() != 2) fail("reference has " + std::to_string(ref.val_loss.size()) + " evaluations, want 2");
        if (!(ref.loss.back() < ref.loss.front())) fail("reference loss did not fall");
        if (g_rank == 0)
          std::printf("[zero] reference: loss %.5f → %.5f, clipped in %d of %zu steps\n", ref.loss.front(),
                      ref.loss.back(), clipped, ref.loss.size());
      }

      // One rank at stages 1 and 2: the optimizer works on the flat weights and (stage 1) gradients
      // themselves rather than on shard copies (parallel/zero/optimizer.cpp); the same run as stage 0.
      for (int stage : {1, 2}) {
        const std::string tag = "one_rank_stage" + std::to_string(stage);
        const Run one = train_reference(yaml, work, {"train.micro_batch=8", "parallel.zero_stage=" + std::to_string(stage)}, tag);
        worst_rel(one.loss, ref.loss, "loss", tag, 1e-6);
        worst_rel(one.grad_norm, ref.grad_norm, "grad norm", tag, 1e-6);
        worst_rel(one.val_loss, ref.val_loss, "val loss", tag, 1e-6);
        for (const auto& [name, want] : ref.master) {
          const auto it = one.master.find(name);
          if (it == one.master.end()) {
            fail(tag + ": no master weights of " + name);
            continue;
          }
          std::vector<double> a(it->second.begin(), it->second.end()), b(want.begin(), want.end());
          worst_rel(a, b, "master " + name, tag, 1e-5);
        }
      }

      // Micro-batches per rank: 8 sequences / W ranks split into 2 (4 at dp 2) micro-batches.
      const int mb = W == 2 ? 2 : 1;
      std::vector<Variant> variants;
      for (int stage = 0; stage <= 3; ++stage) variants.push_back({"stage" + std::to_string(stage), stage, mb});
      variants.push_back({"stage3_single_micro", 3, 8 / W, 1});
      variants.push_back({"stage3_prefetch0", 3, mb, 0});
      if (W == 2) {
        variants.push_back({"stage3_prefetch2_accum4", 3, 1, 2});
        variants.push_back({"stage2_single_micro", 2, 4, 1});
        variants.push_back({"stage1_no_overlap", 1, mb, 1, false});
        variants.push_back({"stage0_no_overlap", 0, mb, 1, false});
      }
      for (int stage = 0; stage <= 3; ++stage) {
        Variant v{"stage" + std::to_string(stage) + "_bf16_state", stage, mb};
        v.bf16_state = true;
        variants.push_back(v);
      }
      for (const Variant& v : variants) check_variant(*world, yaml, work, v, v.bf16_state ? ref_bf16 : ref);
    } catch (const std::exception& e) {
      fail(std::string("exception: ") + e.what());
    }
    code = finish("zero");
  }
  mpi_finalize();
  return code;
}
