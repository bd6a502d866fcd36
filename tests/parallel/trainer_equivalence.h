// What the in-process multi-rank equivalence tests share (tests/parallel/tensor/tp_equivalence_test,
// tests/parallel/zero/zero_equivalence_test; CPU, fp32, under mpirun): failures counted per rank and summed at
// the end, the dataset they train on, the Trainer run on a communicator, the per-step results a run
// wrote, and the single-rank reference with its full final optimizer state.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "data/data_tools.h"
#include "launch/config/config.h"
#include "launch/train/trainer.h"
#include "runtime/mpi_communicator.h"
#include "runtime/ops.h"

namespace tetra::equivalence {

inline int g_failures = 0;  // this rank's
inline int g_rank = 0;

inline void fail(const std::string& what) {
  ++g_failures;
  std::fprintf(stderr, "rank %d: FAIL: %s\n", g_rank, what.c_str());
}

// Sums the failures of all ranks; rank 0 prints "[TAG] PASSED|FAILED (N failures over all ranks)".
// Returns the exit code.
inline int finish(const char* tag) {
  int failures = g_failures;
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("[%s] %s (%d failures over all ranks)\n", tag, failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}

// WORK/train.h5 from two licence texts, made by rank 0 where it is missing; every rank waits for it.
inline std::string prepare_data(MpiCommunicator& world, const std::string& work) {
  const std::string data = work + "/train.h5";
  if (world.rank() == 0) {
    std::filesystem::create_directories(work);
    if (!std::filesystem::exists(data)) {
      data::PrepareOptions po;
      po.inputs = {TETRA_SOURCE_DIR "/tests/data/text/GPL-3", TETRA_SOURCE_DIR "/tests/data/text/Apache-2.0"};
      po.out = data;
      std::ostringstream log;
      data::prepare_dataset(po, log);
    }
  }
  world.barrier();
  return data;
}

struct Run {
  std::vector<double> loss, grad_norm, val_loss;
  std::map<std::string, std::vector<float>> master, exp_avg, exp_avg_sq;  // full, from the reference
};

// t's elements as fp32 (bf16 moments under optimizer.state_dtype bf16 widen exactly).
inline std::vector<float> host_floats(const Tensor& t) {
  Tensor f = Tensor::empty({t.numel()}, DType::F32);
  ops::copy(f, t.view({t.numel()}));
  const float* p = f.data<float>();
  return std::vector<float>(p, p + t.numel());
}

// The gradient norms and val losses of RUN_DIR/metrics.jsonl.
inline void read_metrics(const std::string& run_dir, Run& r) {
  std::ifstream f(std::filesystem::path(run_dir) / "metrics.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    r.grad_norm.push_back(j["grad_norm"].get<double>());
    if (j.contains("val_loss")) r.val_loss.push_back(j["val_loss"].get<double>());
  }
}

// The Trainer of `yaml` (with `overrides` and run.name = name) run to the end on `world`.
inline std::unique_ptr<launch::Trainer> train(MpiCommunicator& world, const std::string& yaml, const std::string& name,
                                              const std::vector<std::string>& overrides) {
  std::vector<std::string> o = overrides;
  o.push_back("run.name=" + name);
  launch::Config cfg =
      launch::resolve(launch::parse_config(yaml, name + ".yaml", o), world.size(), /*cuda_available=*/false);
  launch::validate_for_training(cfg);
  launch::LaunchEnvironment env;
  env.launcher = "mpirun";
  env.rank = world.rank();
  env.world_size = world.size();
  env.local_rank = world.rank();
  env.local_size = world.size();
  env.host = "localhost";
  env.process_start_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto t = std::make_unique<launch::Trainer>(cfg, env, world);
  t->run();
  return t;
}

// The reference: one process alone (each rank computes it on MPI_COMM_SELF, in its own run
// directory WORK/runs/reference[_TAG]_rankR): per-step results and the full final optimizer state.
inline Run train_reference(const std::string& yaml, const std::string& work,
                           const std::vector<std::string>& overrides, const std::string& tag = "") {
  Run ref;
  MpiCommunicator self(MPI_COMM_SELF);
  const std::string name = "reference" + (tag.empty() ? tag : "_" + tag) + "_rank" + std::to_string(g_rank);
  std::unique_ptr<launch::Trainer> tr = train(self, yaml, name, overrides);
  ref.loss = tr->losses();
  read_metrics(work + "/runs/" + name, ref);
  for (const StatePiece& s : tr->optimizer().pieces_to_save()) {
    ref.master[s.name] = host_floats(s.master);
    ref.exp_avg[s.name] = host_floats(s.exp_avg);
    ref.exp_avg_sq[s.name] = host_floats(s.exp_avg_sq);
  }
  return ref;
}

inline double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// The largest relative difference of a from the reference b, which must be within tol.
inline double worst_rel(const std::vector<double>& a, const std::vector<double>& b, const std::string& what,
                        const std::string& variant, double tol) {
  if (a.size() != b.size() || a.empty()) {
    fail(variant + ": " + what + " has " + std::to_string(a.size()) + " values, reference " + std::to_string(b.size()));
    return INFINITY;
  }
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) w = std::max(w, rel(a[i], b[i]));
  if (!(w <= tol)) fail(variant + ": " + what + " differs from the single-rank run by " + std::to_string(w));
  return w;
}

}  // namespace tetra::equivalence
