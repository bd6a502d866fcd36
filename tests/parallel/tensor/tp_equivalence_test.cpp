// Tensor parallelism reproduces the single-rank run (CPU, fp32, under mpirun): the Trainer at
// tp × dp × ZeRO stage, sequence parallelism on and off, GPT-2 and Llama (grouped-query attention,
// tied and untied output layer; key/value heads split over tp, or replicated where tp is a multiple
// of them), against the same config trained by one process alone. Odd sizes
// that still divide: 12 heads (3 a rank at tp 4), a vocabulary of 260 (65 rows a rank at tp 4),
// micro-batches of 2 × 10 tokens (5 a rank with sequence parallelism at tp 4), Llama's MLP of 60
// (15 a rank). Gradient accumulation and clipping are active.
// Checked per step: loss, gradient norm, val loss (≤ 1e-6 relative); at the end the fp32 master
// weights and both AdamW moments (norm-wise per parameter, ≤ 1e-5 relative), and that the ranks'
// checkpoint pieces (boxes of the full tensors) cover every element of every parameter exactly once.
//
// optimizer.eps is 1e-3: AdamW's step lr·m̂/(√v̂ + eps) is ill-conditioned where |g| ≈ eps, so with
// eps = 1e-8 a rounding-level difference in such an element's gradient moves its weight by up to
// lr (measured: 2 of the 1296 elements of h.1.attn.c_proj.weight moved by 2e-6 after one step at
// tp 2, every other element within an ulp; plain data parallelism does the same elsewhere). A
// large eps keeps every step well-conditioned. eps and the limits are the equivalence tests' scheme
// (tests/tetra_runs.py, docs/testing.md "Tolerances"): ~100× above what a correct run reaches
// against itself with only its summation order changed (loss and gradient norm ~1e-8, tensors
// that start at zero ~1e-7 norm-wise).
//
// usage: mpirun -np N tp_equivalence_test WORK_DIR ARCH VARIANT...
//   (ARCH: gpt2, llama, llama_tied, llama_kv2, llama_kv1, qwen2, qwen2_kv2_tied, qwen3, mistral)
//   VARIANT = tpT_dpD_zZ[_nosp][_rfull|_rmlp][_ppP][_ovl]  (T·D·P must divide N; N / (T·D·P) groups run
//   it side by side; _nosp: sequence parallelism off; _ovl: parallel.tp_comm_overlap on (the chunked
//   ring exchanges of parallel/tensor/linear.h; off otherwise); _rfull, _rmlp: train.recompute full, mlp; _ppP:
//   P pipeline stages, schedule 1f1b)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "tests/parallel/trainer_equivalence.h"

namespace fs = std::filesystem;
using namespace tetra;
using namespace tetra::launch;
using namespace tetra::equivalence;

namespace {

constexpr double kTol = 1e-6;       // per-step loss, gradient norm, val loss
constexpr double kStateTol = 1e-5;  // final state, ‖a − ref‖ / ‖ref‖ per parameter

struct Variant {
  std::string name;
  int tp = 1, dp = 1, zero = 0, pp = 1;
  bool sp = true, overlap = false;
  std::string recompute = "none";
};

Variant parse_variant(const std::string& s) {
  Variant v;
  v.name = s;
  if (std::sscanf(s.c_str(), "tp%d_dp%d_z%d", &v.tp, &v.dp, &v.zero) != 3)
    throw std::runtime_error("variant " + s + " is not tpT_dpD_zZ[_nosp][_rfull|_rmlp][_ppP]");
  v.sp = s.find("_nosp") == std::string::npos;
  v.overlap = s.find("_ovl") != std::string::npos;
  if (s.find("_rfull") != std::string::npos) v.recompute = "full";
  if (s.find("_rmlp") != std::string::npos) v.recompute = "mlp";
  if (const size_t at = s.find("_pp"); at != std::string::npos) v.pp = std::stoi(s.substr(at + 3));
  return v;
}

// gpt2: 12 heads of 3 channels. llama: 12 query heads of 4 channels in 4 key/value groups (one group
// a rank at tp 4), an MLP of 60 (15 a rank at tp 4); llama_tied: the same with the output layer
// tied to the embedding. llama_kv2, llama_kv1: 2 key/value heads (each replicated over 2 ranks at
// tp 4) and 1 (multi-query: on every rank at tp 2 and 4). qwen2: llama's shape with q/k/v biases
// (split with their heads; qwen2_kv2_tied: the key/value biases replicated at tp 4 with the heads);
// qwen3: 2 key/value heads (replicated at tp 4) with per-head q/k norms, head_dim 8 (not 48 / 12 = 4);
// mistral: llama's with a window covering the context.
std::string model_yaml(const std::string& arch) {
  if (arch == "gpt2") return "{arch: gpt2, vocab_size: 260, seq_len: 10, d_model: 36, n_layers: 2, n_heads: 12}";
  if (arch == "qwen2" || arch == "qwen2_kv2_tied")
    return "{arch: qwen2, vocab_size: 260, seq_len: 10, d_model: 48, n_layers: 2, n_heads: 12, n_kv_heads: " +
           std::string(arch == "qwen2" ? "4" : "2") + ", ffn_dim: 60, tie_embeddings: " +
           (arch == "qwen2" ? "false" : "true") + "}";
  if (arch == "qwen3")
    return "{arch: qwen3, vocab_size: 260, seq_len: 10, d_model: 48, n_layers: 2, n_heads: 12, n_kv_heads: 2, "
           "head_dim: 8, ffn_dim: 60}";
  if (arch == "mistral")
    return "{arch: mistral, vocab_size: 260, seq_len: 10, d_model: 48, n_layers: 2, n_heads: 12, n_kv_heads: 4, "
           "ffn_dim: 60, sliding_window: 10}";
  const std::string tied = arch == "llama_tied" ? "true" : "false";
  const std::string kv = arch == "llama_kv2" ? "2" : arch == "llama_kv1" ? "1" : "4";
  if (arch == "llama" || arch == "llama_tied" || arch == "llama_kv2" || arch == "llama_kv1")
    return "{arch: llama, vocab_size: 260, seq_len: 10, d_model: 48, n_layers: 2, n_heads: 12, n_kv_heads: " + kv +
           ", ffn_dim: 60, tie_embeddings: " + tied + "}";
  throw std::runtime_error("unknown ARCH " + arch +
                           " (gpt2, llama, llama_tied, llama_kv2, llama_kv1, qwen2, qwen2_kv2_tied, qwen3, mistral)");
}

std::string config_yaml(const std::string& work, const std::string& data, const std::string& arch) {
  std::ostringstream os;
  os << "run: {name: base, output_dir: " << work << "/runs, seed: 5}\n"
     << "model: " << model_yaml(arch) << "\n"
     << "train: {steps: 4, global_batch: 8, micro_batch: 2, device: cpu, precision: fp32, grad_clip: 0.5, "
        "eval_every: 2, eval_batches: 1}\n"
     << "optimizer: {lr: 3.0e-3, betas: [0.9, 0.95], eps: 1.0e-3, weight_decay: 0.1, warmup_steps: 1, schedule: cosine, "
        "min_lr: 1.0e-4}\n"
     << "data: {train: " << data << ", val: " << data << ", shuffle: true}\n"
     << "log: {every: 100}\n";
  return os.str();
}

// Element i of a box (row-major over the box) as an index into the flattened full tensor.
int64_t full_index(const TensorBox& box, const Shape& full, int64_t i) {
  if (box.shape.empty()) return i;
  int64_t out = 0, stride = 1;
  for (size_t d = full.size(); d-- > 0;) {
    const int64_t k = i % box.shape[d] + box.offset[d];
    i /= box.shape[d];
    out += k * stride;
    stride *= full[d];
  }
  return out;
}

void check_variant(MpiCommunicator& world, const std::string& yaml, const std::string& work, const Variant& v,
                   const Run& ref) {
  const int W = world.size(), group_size = v.tp * v.dp * v.pp;
  if (W % group_size != 0) {
    fail(v.name + ": needs a multiple of " + std::to_string(group_size) + " ranks, the job has " + std::to_string(W));
    return;
  }
  // Groups of tp·dp consecutive ranks run the variant side by side, each in its own run directory.
  const int group = world.rank() / group_size;
  MPI_Comm sub_comm;
  MPI_Comm_split(world.handle(), group, world.rank(), &sub_comm);
  {
    MpiCommunicator sub(sub_comm);
    const std::string name = v.name + "_g" + std::to_string(group);
    std::vector<std::string> o = {"parallel.tp=" + std::to_string(v.tp), "parallel.dp=" + std::to_string(v.dp),
                                  "parallel.pp=" + std::to_string(v.pp),
                                  "parallel.zero_stage=" + std::to_string(v.zero),
                                  std::string("parallel.sequence_parallel=") + (v.sp ? "true" : "false"),
                                  std::string("parallel.tp_comm_overlap=") + (v.overlap ? "on" : "off"),
                                  "train.recompute=" + v.recompute};
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Trainer> tr = train(sub, yaml, name, o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    Run got;
    got.loss = tr->losses();
    double wl = worst_rel(got.loss, ref.loss, "per-step loss", v.name, kTol);
    double wg = 0, wv = 0;
    if (sub.rank() == 0) {
      read_metrics(work + "/runs/" + name, got);
      wg = worst_rel(got.grad_norm, ref.grad_norm, "gradient norm", v.name, kTol);
      wv = worst_rel(got.val_loss, ref.val_loss, "val loss", v.name, kTol);
    }

    // Final optimizer state: every piece this rank saves matches the reference at its box's
    // elements; over the group's ranks the pieces cover every element exactly once.
    std::map<std::string, size_t> index;
    std::vector<int64_t> base;
    std::vector<std::string> names;
    int64_t total = 0;
    for (Param* p : tr->model().params()) {
      index[p->name] = base.size();
      base.push_back(total);
      names.push_back(p->name);
      total += shape_numel(p->full_shape);
    }
    std::vector<int> cover(static_cast<size_t>(total), 0);
    const size_t P = base.size();
    std::vector<double> num(3 * P, 0.0), den(3 * P, 0.0);
    for (const StatePiece& s : tr->optimizer().pieces_to_save()) {
      auto it = index.find(s.name);
      if (it == index.end()) {
        fail(v.name + ": piece of unknown parameter " + s.name);
        continue;
      }
      const size_t k = it->second;
      const std::vector<float>* refs[3] = {&ref.master.at(s.name), &ref.exp_avg.at(s.name), &ref.exp_avg_sq.at(s.name)};
      const Tensor* mine[3] = {&s.master, &s.exp_avg, &s.exp_avg_sq};
      for (int64_t e = s.begin; e < s.end; ++e) {
        const int64_t f = full_index(s.box, s.full_shape, e);
        ++cover[static_cast<size_t>(base[k] + f)];
        for (int q = 0; q < 3; ++q) {
          const double r = (*refs[q])[static_cast<size_t>(f)], d = mine[q]->data<float>()[e - s.begin] - r;
          num[q * P + k] += d * d;
          den[q * P + k] += r * r;
        }
      }
    }
    MPI_Allreduce(MPI_IN_PLACE, cover.data(), static_cast<int>(cover.size()), MPI_INT, MPI_SUM, sub_comm);
    MPI_Allreduce(MPI_IN_PLACE, num.data(), static_cast<int>(num.size()), MPI_DOUBLE, MPI_SUM, sub_comm);
    MPI_Allreduce(MPI_IN_PLACE, den.data(), static_cast<int>(den.size()), MPI_DOUBLE, MPI_SUM, sub_comm);
    const int64_t bad = std::count_if(cover.begin(), cover.end(), [](int c) { return c != 1; });
    if (bad) fail(v.name + ": " + std::to_string(bad) + " parameter elements not saved by exactly one rank");
    double ws = 0;
    std::string worst;
    for (size_t i = 0; i < num.size(); ++i) {
      const std::string& n = names[i % P];
      const double e = std::sqrt(num[i] / std::max(den[i], 1e-30));
      if (!(e <= kStateTol))
        fail(v.name + ": final " + (i < P ? "master weights" : i < 2 * P ? "exp_avg" : "exp_avg_sq") + " of " + n +
             " differ by " + std::to_string(e));
      if (e > ws) {
        ws = e;
        worst = n;
      }
    }
    if (world.rank() == 0)
      std::printf("[tp] %-18s: loss %.1e, grad norm %.1e, val %.1e, state %.1e (%s) | %.1f s\n", v.name.c_str(), wl,
                  wg, wv, ws, worst.c_str(), seconds);
    std::fflush(stdout);
  }
  MPI_Comm_free(&sub_comm);
}

}  // namespace

int main(int argc, char** argv) {
  mpi_initialize(&argc, &argv);
  int code = 0;
  {
    auto world = MpiCommunicator::world();
    g_rank = world->rank();
    if (argc < 4) {
      std::fprintf(stderr, "usage: tp_equivalence_test WORK_DIR ARCH VARIANT...\n");
      return 2;
    }
    const std::string work = fs::absolute(argv[1]).string();
    const std::string arch = argv[2];
    try {
      const std::string data = prepare_data(*world, work);
      const std::string yaml = config_yaml(work, data, arch);

      // The reference: one process alone, all 8 sequences of a step in 4 micro-batches.
      const Run ref = train_reference(yaml, work, {});
      {
        const int clipped = static_cast<int>(
            std::count_if(ref.grad_norm.begin(), ref.grad_norm.end(), [](double g) { return g > 0.5; }));
        if (clipped == 0) fail("clipping never active in the reference");
        if (ref.val_loss.size() != 2) fail("reference has " + std::to_string(ref.val_loss.size()) + " evaluations, want 2");
        if (g_rank == 0)
          std::printf("[tp] %s reference: loss %.5f → %.5f, clipped in %d of %zu steps\n", arch.c_str(),
                      ref.loss.front(), ref.loss.back(), clipped, ref.loss.size());
      }
      for (int i = 3; i < argc; ++i) check_variant(*world, yaml, work, parse_variant(argv[i]), ref);
    } catch (const std::exception& e) {
      fail(std::string("exception: ") + e.what());
    }
    code = finish("tp");
  }
  mpi_finalize();
  return code;
}
