// Tensor-parallel overlap benchmark (a program, not a test): every primitive of parallel/tensor/linear.h
// at the layer shapes of Llama-3.2-1B and GPT-2 1.3B (N = 16384 tokens, C = 2048, F = 8192; the
// attention projections C → 3C and C → C, the MLP C → F (GPT-2), C → 2F (Llama's fused gate/up)
// and F → C), plain and overlapped, on tp ranks under mpirun (one GPU each, NCCL). Per primitive,
// shape and path: the step time (compute stream, events; median of --reps after warm-up, largest
// over ranks), the exposed TP communication the CommScheduler measured, the same chunk GEMMs with no
// communication at all (the floor overlap can reach), and the byte floor of the collective at the
// assumed bus bandwidth (--busbw GB/s, default 270: NVLink as measured on H100/H200 nodes).
// Prints one JSON object per line on rank 0.
//
//   mpirun -np 2 tetra_tp_overlap_bench [--tokens N] [--reps R] [--busbw GBps] [--only NAME]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/comm_scheduler.h"
#include "parallel/tensor/linear.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/mpi_communicator.h"
#include "runtime/nccl_communicator.h"
#include "runtime/ops.h"
#include "runtime/stream.h"

namespace tetra {
namespace {

struct Options {
  int64_t tokens = 16384;
  int reps = 20;
  double busbw_gbps = 270;
  std::string only;
};

// One linear layer of the benchmarked models: [in] → [out] features (full, before the tp split).
struct Shape2 {
  std::string name;
  int64_t in, out;
  bool column;  // column-parallel (split out) or row-parallel (split in)
};

const int64_t kC = 2048, kF = 8192;
const Shape2 kShapes[] = {{"qkv C->3C", kC, 3 * kC, true},
                          {"attn_out C->C", kC, kC, false},
                          {"fc C->F", kC, kF, true},
                          {"gate_up C->2F", kC, 2 * kF, true},
                          {"proj F->C", kF, kC, false}};

struct Result {
  double ms = 0, exposed_ms = 0;
};

Tensor filled(const Shape& s, float v, Device d) {
  Tensor t = Tensor::empty(s, DType::BF16, d);
  ops::fill(t, v);
  return t;
}

// Median over reps of one call's time (compute stream) and of its exposed TP wait; largest over ranks.
Result measure(CommScheduler& sched, const std::function<void()>& call, int reps, Device dev) {
  for (int i = 0; i < 3; ++i) {  // warm-up: GEMM tuning, NCCL connections, allocator
    sched.begin_step();
    call();
    sched.end_step();
  }
  std::vector<double> ms, exposed;
  for (int i = 0; i < reps; ++i) {
    device_synchronize(dev);
    MPI_Barrier(MPI_COMM_WORLD);
    Event start(dev), end(dev);
    sched.begin_step();
    start.record_timing(current_stream(dev));
    call();
    end.record_timing(current_stream(dev));
    sched.end_step();
    ms.push_back(end.elapsed_ms(start));
    exposed.push_back(sched.exposed_ms(MeshAxis::TP));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double local[2] = {median(ms), median(exposed)}, worst[2];
  MPI_Allreduce(local, worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return {worst[0], worst[1]};
}

// One primitive at one shape: the call, the same chunk GEMMs without communication, and the bytes of
// the full [N, ·] tensor its collective moves.
struct Case {
  std::string name;
  std::function<void()> call, compute_only;
  int64_t bytes;
};

// parts[q] = x's q-th chunk of m rows · wᵀ, q < tp: the chunk GEMMs of a row-parallel forward with
// no communication (parts [tp, m, out]).
void chunk_forwards(Tensor& parts, const Tensor& x, const Tensor& w, int64_t m, int tp) {
  for (int q = 0; q < tp; ++q) {
    Tensor pq = parts.narrow(q, 1).view({m, w.dim(0)});
    ops::linear_forward(pq, x.narrow(q * m, m), w, Tensor());
  }
}

// parts[q] = dy's q-th chunk of m rows · w, q < tp: the chunk GEMMs of a column-parallel input
// gradient with no communication (parts [tp, m, in]).
void chunk_backward_inputs(Tensor& parts, const Tensor& dy, const Tensor& w, int64_t m, int tp) {
  for (int q = 0; q < tp; ++q) {
    Tensor pq = parts.narrow(q, 1).view({m, w.dim(1)});
    ops::linear_backward_input(pq, dy.narrow(q * m, m), w);
  }
}

// The column-parallel primitives of a layer [in] → [out / tp] (w [out, in] this rank's rows), on n
// tokens, m = n / tp per rank under sequence parallelism.
std::vector<Case> column_cases(TpGroup& g, const Tensor& w, const Tensor& b, int64_t n, int64_t m, int tp, Device dev) {
  const int64_t out = w.dim(0), in = w.dim(1);
  Tensor x_shard = filled({m, in}, 0.5f, dev), xg = filled({n, in}, 0.5f, dev), y = filled({n, out}, 0, dev);
  Tensor dy = filled({n, out}, 0.01f, dev), dx = filled({m, in}, 0, dev), dx_full = filled({n, in}, 0, dev);
  Tensor dw = Tensor::empty({out, in}, DType::F32, dev), parts = filled({tp, m, in}, 0, dev);
  std::vector<Case> cases;
  cases.push_back(
      {"all_gather_linear_forward",
       [=, &g]() mutable { tp::all_gather_linear_forward(g, y, x_shard, w, b, ops::Activation::None, nullptr, &xg); },
       [=]() mutable {
         for (int q = 0; q < tp; ++q) {
           Tensor yq = y.narrow(q * m, m);
           ops::linear_forward(yq, xg.narrow(q * m, m), w, b);
         }
       },
       n * in * 2});
  cases.push_back({"linear_backward_input_reduce_scatter + wgrad",
                   [=, &g]() mutable {
                     tp::linear_backward_input_reduce_scatter(
                         g, dx, dy, w, [&] { ops::linear_backward_weight(dw, nullptr, dy, xg, true); });
                   },
                   [=]() mutable {
                     chunk_backward_inputs(parts, dy, w, m, tp);
                     ops::linear_backward_weight(dw, nullptr, dy, xg, true);
                     ops::sum_partials(dx, parts, Tensor());
                   },
                   n * in * 2});
  cases.push_back({"linear_backward_input_all_reduce (no SP)",
                   [=, &g]() mutable { tp::linear_backward_input_all_reduce(g, dx_full, dy, w); },
                   [=]() mutable {
                     chunk_backward_inputs(parts, dy, w, m, tp);
                   },
                   2 * n * in * 2});
  return cases;
}

// The row-parallel primitives of a layer [in / tp] → [out] (w [out, in / tp] this rank's columns).
std::vector<Case> row_cases(TpGroup& g, const Tensor& w, const Tensor& b, int64_t n, int64_t m, int tp, Device dev) {
  const int64_t out = w.dim(0), in = w.dim(1);
  Tensor x = filled({n, in}, 0.5f, dev), y_shard = filled({m, out}, 0, dev), res = filled({m, out}, 0.1f, dev);
  Tensor y_full = filled({n, out}, 0, dev), res_full = filled({n, out}, 0.1f, dev);
  Tensor dy_shard = filled({m, out}, 0.01f, dev), dyg = filled({n, out}, 0, dev), dx = filled({n, in}, 0, dev);
  Tensor parts = filled({tp, m, out}, 0, dev);
  std::vector<Case> cases;
  cases.push_back({"linear_forward_reduce_scatter",
                   [=, &g]() mutable { tp::linear_forward_reduce_scatter(g, y_shard, x, w, b, &res); },
                   [=]() mutable {
                     chunk_forwards(parts, x, w, m, tp);
                     ops::sum_partials(y_shard, parts, b, &res);
                   },
                   n * out * 2});
  cases.push_back({"all_gather_linear_backward_input",
                   [=, &g]() mutable { tp::all_gather_linear_backward_input(g, dx, dy_shard, w, nullptr, &dyg); },
                   [=]() mutable {
                     for (int q = 0; q < tp; ++q) {
                       Tensor dxq = dx.narrow(q * m, m);
                       ops::linear_backward_input(dxq, dyg.narrow(q * m, m), w);
                     }
                   },
                   n * out * 2});
  cases.push_back({"linear_forward_all_reduce (no SP)",
                   [=, &g]() mutable { tp::linear_forward_all_reduce(g, y_full, x, w, b, &res_full); },
                   [=]() mutable {
                     chunk_forwards(parts, x, w, m, tp);
                   },
                   2 * n * out * 2});
  return cases;
}

int run(const Options& o) {
  auto world = MpiCommunicator::world();
  const int tp = world->size(), r = world->rank();
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &local);
  int local_rank = 0;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_free(&local);
  const Device dev = Device::cuda(local_rank);
  cuda::set_device(dev);
  auto nccl = make_nccl_communicator(MPI_COMM_WORLD, dev, nullptr);
  CommScheduler sched(dev);
  TpGroup g(*nccl, sched, false);
  const int64_t n = o.tokens, m = g.shard_rows(n, "--tokens");
  const double floor_scale = static_cast<double>(tp - 1) / tp / (o.busbw_gbps * 1e9) * 1e3;  // ms per byte of [N, ·]

  for (const Shape2& s : kShapes) {
    const int64_t in = s.column ? s.in : s.in / tp, out = s.column ? s.out / tp : s.out;
    const Tensor w = filled({out, in}, 0.01f, dev), b = filled({s.column ? out : s.out}, 0.0f, dev);
    for (Case& c : s.column ? column_cases(g, w, b, n, m, tp, dev) : row_cases(g, w, b, n, m, tp, dev)) {
      if (!o.only.empty() && c.name.find(o.only) == std::string::npos) continue;
      g.set_overlap(false);
      const Result plain = measure(sched, c.call, o.reps, dev);
      g.set_overlap(true);
      const Result overlapped = measure(sched, c.call, o.reps, dev);
      const Result compute = measure(sched, c.compute_only, o.reps, dev);
      if (r != 0) continue;
      const nlohmann::json j = {{"primitive", c.name},
                                {"layer", s.name},
                                {"tp", tp},
                                {"tokens", n},
                                {"in", in},
                                {"out", out},
                                {"plain_ms", plain.ms},
                                {"plain_exposed_ms", plain.exposed_ms},
                                {"overlap_ms", overlapped.ms},
                                {"overlap_exposed_ms", overlapped.exposed_ms},
                                {"compute_only_ms", compute.ms},
                                {"comm_floor_ms", static_cast<double>(c.bytes) * floor_scale},
                                {"speedup", plain.ms / overlapped.ms}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tetra

int main(int argc, char** argv) {
  tetra::mpi_initialize(&argc, &argv);
  tetra::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tokens")
      o.tokens = std::stoll(next());
    else if (a == "--reps")
      o.reps = std::stoi(next());
    else if (a == "--busbw")
      o.busbw_gbps = std::stod(next());
    else if (a == "--only")
      o.only = next();
    else {
      std::fprintf(stderr, "unknown argument %s (use --tokens N --reps R --busbw GBps --only NAME)\n", a.c_str());
      return 2;
    }
  }
  int rc = 1;
  try {
    rc = tetra::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tetra_tp_overlap_bench: %s\n", e.what());
    tetra::mpi_abort(1);
  }
  tetra::mpi_finalize();
  return rc;
}
