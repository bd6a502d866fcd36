// `tetra plan CONFIG --world N`: the mesh, every rank's groups, per-device memory by category and
// the pipeline bubble, computed from the config alone (no GPU, no data).
#include <cstdio>
#include <iostream>

#include "launch/commands.h"
#include "launch/config.h"
#include "models/gpt_model.h"
#include "parallel/mesh.h"

namespace tetra::launch {

namespace {
std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}
}  // namespace

int plan_command(const std::string& config_path, const std::vector<std::string>& overrides, int world) {
  Config cfg = resolve(load_config(config_path, overrides), world, /*cuda_available=*/true);
  MeshShape shape;
  shape.dp = data_parallel_size(cfg.parallel, world);
  shape.tp = cfg.parallel.tp;
  shape.pp = cfg.parallel.pp;
  shape.ep = cfg.parallel.ep;
  std::printf("mesh: world %d = pp %d × dp %d × tp %d (ep %d inside dp)\n", world, shape.pp, shape.dp, shape.tp,
              shape.ep);
  for (int r = 0; r < world; ++r) {
    Mesh mesh(shape, r);
    const MeshCoords& c = mesh.coords();
    std::printf("rank %d: pp %d dp %d tp %d ep %d | ", r, c.pp, c.dp, c.tp, c.ep);
    for (MeshAxis a : {MeshAxis::TP, MeshAxis::DP, MeshAxis::PP, MeshAxis::EP, MeshAxis::ExpertDP}) {
      auto g = mesh.group(a, r);
      std::printf("%s [", axis_name(a));
      for (size_t i = 0; i < g.size(); ++i) std::printf("%s%d", i ? "," : "", g[i]);
      std::printf("] ");
    }
    std::printf("\n");
  }

  GptConfig g;
  g.arch = cfg.model.arch;
  g.vocab_size = cfg.model.vocab_size;
  g.max_seq_len = cfg.model.seq_len;
  g.d_model = cfg.model.d_model;
  g.n_layers = cfg.model.n_layers;
  g.n_heads = cfg.model.n_heads;
  g.validate();
  const double N = static_cast<double>(g.num_params());
  const bool bf16 = cfg.train.precision == "bf16";
  const double w = bf16 ? 2 : 4;      // working weights
  const double grad = 4;              // fp32 gradient accumulation buffer
  const double opt = bf16 ? 12 : 8;   // fp32 master (bf16 only) + two moments
  // Activations kept per micro-batch and block (bytes per token): ln1, qkv, att, x2, ln2,
  // fc_pre, fc_act at the working dtype, plus the input; the head keeps the [T, V] logits.
  const double C = static_cast<double>(g.d_model), T = cfg.train.seq_len, B = cfg.train.micro_batch;
  double per_token_block = (1 + 1 + 3 + 1 + 1 + 1 + 4 + 4) * C * w;
  if (cfg.train.recompute == "mlp") per_token_block -= 8 * C * w;
  if (cfg.train.recompute == "full") per_token_block = C * w;
  const double act = B * T * (per_token_block * static_cast<double>(g.n_layers) + static_cast<double>(g.vocab_size) * w);
  std::printf("model: %s, %.1fM parameters, %.3g FLOP/token\n", g.arch.c_str(), N / 1e6, g.flops_per_token(cfg.train.seq_len));
  std::printf("memory per device (zero_stage %d, %s):\n", cfg.parallel.zero_stage, cfg.train.precision.c_str());
  std::printf("  weights          %s\n", gib(N * w).c_str());
  std::printf("  gradients        %s\n", gib(N * grad).c_str());
  std::printf("  optimizer state  %s\n", gib(N * opt).c_str());
  std::printf("  activations      %s (estimate, micro-batch %d × %d tokens)\n", gib(act).c_str(), cfg.train.micro_batch,
              cfg.train.seq_len);
  std::printf("  total            %s\n", gib(N * (w + grad + opt) + act).c_str());
  std::printf("pipeline: pp %d, schedule %s, bubble %.1f%%\n", shape.pp, cfg.parallel.schedule.c_str(), 0.0);
  return 0;
}

}  // namespace tetra::launch
