// Checkpoints reshard through the DistributedOptimizer interface (run under mpirun -np 4, CPU):
// state written by one (zero_stage, dp) — every rank its pieces_to_save(), as the checkpoint
// writer does — is read back by another (zero_stage, dp) through pieces_to_load() + after_load().
// Checked: the saved pieces of a job cover every parameter element exactly once; after the load
// every rank's master / exp_avg / exp_avg_sq equal what was saved, and so do the working weights
// (stage 3: gathered layer by layer through the forward hooks). dp 3 exercises uneven padding.
//
// usage: mpirun -np 4 zero_reshard_test WORK_DIR
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "models/gpt_model.h"
#include "parallel/distributed_optimizer.h"
#include "runtime/mpi_communicator.h"
#include "runtime/random.h"

namespace fs = std::filesystem;
using namespace tetra;

namespace {

int g_failures = 0, g_rank = 0;
void fail(const std::string& what) {
  ++g_failures;
  std::fprintf(stderr, "rank %d: FAIL: %s\n", g_rank, what.c_str());
}

// The state every element should hold: distinct per parameter, element and tensor.
float expected(const std::string& name, int64_t i, int which) {
  const double h = static_cast<double>(hash_name(name) % 1000);
  const double x = std::sin(h + 0.37 * static_cast<double>(i) + 1.3 * which);
  return static_cast<float>(which == 2 ? 1e-3 * x * x : 0.1 * x);  // exp_avg_sq is non-negative
}

GptConfig model_config() {
  GptConfig g;
  g.vocab_size = 67;  // odd sizes: padding in every unit
  g.max_seq_len = 9;
  g.d_model = 16;
  g.n_layers = 2;
  g.n_heads = 2;
  return g;
}

// One job's optimizer over a data-parallel group.
struct Job {
  GptModel model{model_config()};
  ParamSet params;
  CommScheduler comm{Device::cpu()};
  std::unique_ptr<DistributedOptimizer> opt;
  Job(Communicator& dp, int stage, uint64_t seed) {
    DistributedOptimizerOptions o;
    o.zero_stage = stage;
    const ParamStorage s = param_storage_for(o, DType::F32, dp.size());
    params.build(model.params(), Device::cpu(), DType::F32, s.grad_dtype, s.shards, s.full_grads);
    params.initialize(seed);
    opt = make_distributed_optimizer(params, dp, comm, o);
  }
};

float* floats(const Tensor& t) { return t.data<float>(); }

// After a load (or the initial fill), every piece and every working weight holds expected().
void verify(Job& job, const std::string& what) {
  double err = 0;
  for (const StatePiece& s : job.opt->pieces_to_save())
    for (int64_t i = s.begin; i < s.end; ++i)
      for (int k = 0; k < 3; ++k) {
        const Tensor& t = k == 0 ? s.master : (k == 1 ? s.exp_avg : s.exp_avg_sq);
        err = std::max(err, std::abs(static_cast<double>(floats(t)[i - s.begin]) - expected(s.name, i, k)));
      }
  const ZeroLayout& L = job.params.layout();
  for (int layer : L.layers()) {
    job.opt->before_forward(layer);
    for (int u : L.units_of_layer(layer))
      for (int pi : L.units()[static_cast<size_t>(u)].params) {
        Param* p = L.params()[static_cast<size_t>(pi)];
        if (!p->value.defined()) {
          fail(what + ": " + p->name + " has no value in its layer's forward");
          continue;
        }
        for (int64_t i = 0; i < p->numel(); ++i)
          err = std::max(err, std::abs(static_cast<double>(floats(p->value)[i]) - expected(p->name, i, 0)));
      }
    job.opt->after_forward(layer);
  }
  if (err != 0) fail(what + ": state differs from what was saved by " + std::to_string(err));
}

void fill(const std::vector<StatePiece>& pieces, const std::map<std::string, std::vector<float>>* saved) {
  for (const StatePiece& s : pieces)
    for (int k = 0; k < 3; ++k) {
      const Tensor& t = k == 0 ? s.master : (k == 1 ? s.exp_avg : s.exp_avg_sq);
      for (int64_t i = s.begin; i < s.end; ++i)
        floats(t)[i - s.begin] = saved ? saved[k].at(s.name)[static_cast<size_t>(i)] : expected(s.name, i, k);
    }
}

// A communicator of `dp` ranks for this rank: ranks 0..dp-1, dp..2dp-1, ...; a short last group
// (dp 3 of 4 ranks) simply runs at its own size.
std::unique_ptr<Communicator> group(Communicator& world, int dp) { return world.split(world.rank() / dp, world.rank()); }

void reshard(MpiCommunicator& world, const fs::path& dir, int stage_a, int dp_a, int stage_b, int dp_b) {
  const std::string what = "stage " + std::to_string(stage_a) + " dp " + std::to_string(dp_a) + " → stage " +
                           std::to_string(stage_b) + " dp " + std::to_string(dp_b);
  const fs::path ckpt = dir / ("ckpt_" + std::to_string(stage_a) + "_" + std::to_string(dp_a));
  // Save: the group holding world rank 0 writes one file per rank of its pieces.
  {
    auto g = group(world, dp_a);
    Job src(*g, stage_a, 1);
    fill(src.opt->pieces_to_load(), nullptr);
    src.opt->after_load();
    verify(src, what + " (source)");
    if (world.rank() < dp_a) {
      fs::create_directories(ckpt);
      std::ofstream f(ckpt / ("rank_" + std::to_string(g->rank()) + ".bin"), std::ios::binary);
      for (const StatePiece& s : src.opt->pieces_to_save()) {
        const int64_t n = s.end - s.begin, len = static_cast<int64_t>(s.name.size());
        f.write(reinterpret_cast<const char*>(&len), 8).write(s.name.data(), len);
        f.write(reinterpret_cast<const char*>(&s.begin), 8).write(reinterpret_cast<const char*>(&s.end), 8);
        for (const Tensor* t : {&s.master, &s.exp_avg, &s.exp_avg_sq})
          f.write(reinterpret_cast<const char*>(floats(*t)), n * 4);
      }
    }
  }
  world.barrier();
  // Read every rank's file: full tensors, and how often each element was written.
  std::map<std::string, std::vector<float>> saved[3];
  std::map<std::string, std::vector<int>> count;
  GptModel shapes(model_config());
  for (Param* p : shapes.params()) {
    for (auto& s : saved) s[p->name].assign(static_cast<size_t>(p->numel()), NAN);
    count[p->name].assign(static_cast<size_t>(p->numel()), 0);
  }
  for (const auto& entry : fs::directory_iterator(ckpt)) {
    std::ifstream f(entry.path(), std::ios::binary);
    int64_t len = 0;
    while (f.read(reinterpret_cast<char*>(&len), 8)) {
      std::string name(static_cast<size_t>(len), '\0');
      int64_t b = 0, e = 0;
      f.read(name.data(), len).read(reinterpret_cast<char*>(&b), 8).read(reinterpret_cast<char*>(&e), 8);
      for (auto& s : saved) f.read(reinterpret_cast<char*>(s[name].data() + b), (e - b) * 4);
      for (int64_t i = b; i < e; ++i) ++count[name][static_cast<size_t>(i)];
    }
  }
  int64_t bad = 0;
  for (auto& [name, c] : count)
    for (int x : c) bad += x != 1;
  if (bad) fail(what + ": the saved pieces do not cover " + std::to_string(bad) + " elements exactly once");
  // Load at the other layout, from a differently initialised job.
  {
    auto g = group(world, dp_b);
    Job dst(*g, stage_b, 2);
    fill(dst.opt->pieces_to_load(), saved);
    dst.opt->after_load();
    verify(dst, what);
  }
  world.barrier();
  if (world.rank() == 0) std::printf("[zero] reshard %s: %s\n", what.c_str(), g_failures ? "FAIL" : "ok");
}

}  // namespace

int main(int argc, char** argv) {
  mpi_initialize(&argc, &argv);
  int code = 0;
  {
    auto world = MpiCommunicator::world();
    g_rank = world->rank();
    if (argc < 2 || world->size() != 4) {
      if (g_rank == 0) std::fprintf(stderr, "usage: mpirun -np 4 zero_reshard_test WORK_DIR\n");
      mpi_finalize();
      return 2;
    }
    const fs::path dir = fs::absolute(argv[1]);
    if (g_rank == 0) {
      fs::remove_all(dir);
      fs::create_directories(dir);
    }
    world->barrier();
    try {
      const int cases[][4] = {{1, 2, 3, 4}, {3, 4, 1, 2}, {2, 4, 0, 1}, {0, 1, 3, 4},
                              {3, 2, 2, 4}, {3, 3, 1, 4}, {2, 1, 3, 3}, {1, 4, 3, 2}};
      for (const auto& c : cases) reshard(*world, dir, c[0], c[1], c[2], c[3]);
    } catch (const std::exception& e) {
      fail(std::string("exception: ") + e.what());
    }
    int failures = g_failures;
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0) std::printf("[zero] reshard %s (%d failures over all ranks)\n", failures ? "FAILED" : "PASSED", failures);
    code = failures ? 1 : 0;
  }
  mpi_finalize();
  return code;
}
