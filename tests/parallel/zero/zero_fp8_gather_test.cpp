// ZeRO-3's FP8 gather (parallel/zero/fp8_gather.h) under mpirun (CPU ranks): a ParamSet of three
// layers — two units with FP8 weights (shapes whose 128×128 blocks the shards cut mid-row and
// mid-block) beside biases and a norm, and a unit without any — sharded over the world and gathered
// layer by layer through ZeroParamGather's hooks, forward then backward (each unit kept gathered
// through the step, so each is gathered once). At every gather, on every
// rank: each FP8 weight's fp8_q and fp8_scale are bit for bit what ops::fp8_quantize of the whole
// weight writes (what a run without ZeRO-3 casts), its value stays undefined, and the other
// parameters' values are their initial ones exactly. The bytes the gathers wrote: a byte per
// element of an FP8 unit plus the working dtype's of its other parameters (at most one rank-padded
// copy) — against the same run with the FP8 weights gathered in the working dtype, under half in
// bf16. After the shards change (×2, exact) and weights_changed(), the next gather casts again: the
// same codes, twice the scales. Tensorwise and 128×128 blocks; fp32 and bf16 working weights.
//
// usage: mpirun -np N zero_fp8_gather_test
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "parallel/param_set.h"
#include "parallel/zero/param_gather.h"
#include "runtime/fp8_cast_shape.h"
#include "runtime/mpi_communicator.h"

using namespace tetra;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  ++failures;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  ops::copy(c, t);
  return c;
}

struct Model {
  std::vector<std::unique_ptr<Param>> params;
  Param& add(const std::string& name, Shape shape, int layer, bool fp8, ops::Fp8Scaling scaling) {
    auto p = std::make_unique<Param>();
    p->name = name;
    p->full_shape = p->local_shape = shape;
    p->layer_index = layer;
    p->init_std = 0.5f;
    p->fp8_weight = fp8;
    p->fp8_scaling = scaling;
    params.push_back(std::move(p));
    return *params.back();
  }
  std::vector<Param*> pointers() const {
    std::vector<Param*> out;
    for (const auto& p : params) out.push_back(p.get());
    return out;
  }
};

Model make_model(bool fp8, ops::Fp8Scaling scaling) {
  Model m;
  m.add("h.0.w1", {144, 272}, 0, fp8, scaling);
  m.add("h.0.b1", {144}, 0, false, scaling);
  m.add("h.0.norm", {272}, 0, false, scaling);
  m.add("h.0.w2", {48, 144}, 0, fp8, scaling);
  m.add("h.1.w", {272, 144}, 1, fp8, scaling);  // a unit of FP8 weights only
  m.add("head", {50, 32}, 2, false, scaling);   // a unit without one
  return m;
}

struct Reference {
  std::vector<Tensor> q, scale, value;  // per param: the whole weight's cast, or the value
};

// One ZeRO-3 setup over `world`: returns the bytes the gathers wrote.
int64_t run(MpiCommunicator& world, DType dt, bool fp8, ops::Fp8Scaling scaling, const std::string& name) {
  Model model = make_model(fp8, scaling);
  ParamSet set;
  set.build(model.pointers(), Device::cpu(), dt, DType::F32, world.size());
  set.initialize(7);
  Reference ref;
  for (const auto& p : model.params) {
    Tensor q, s;
    if (p->fp8_weight) {
      q = Tensor::empty(p->local_shape, DType::F8E4M3);
      s = Tensor::empty(fp8_scale_shape(scaling, p->local_shape[0], p->local_shape[1]), DType::F32);
      ops::fp8_quantize(q, s, p->value, scaling);
    }
    ref.q.push_back(q);
    ref.scale.push_back(s);
    ref.value.push_back(clone(p->value));
  }
  const ZeroLayout& layout = set.layout();
  Tensor shard = Tensor::empty({layout.shard_total()}, dt);
  for (const ZeroUnit& u : layout.units()) {
    Tensor dst = shard.slice_flat(u.shard_offset, {u.shard});
    ops::copy(dst, set.flat_values().slice_flat(u.offset + world.rank() * u.shard, {u.shard}));
  }
  set.release_values();
  CommScheduler scheduler(Device::cpu());
  scheduler.begin_step();
  // Each unit gathered once per step (as under a pipeline schedule), so the bytes count each once.
  ZeroParamGather gather(set, world, scheduler, shard, /*prefetch=*/1, /*keep_in_step=*/true);

  auto check_layer = [&](int layer, float factor, const std::string& when) {
    for (size_t i = 0; i < model.params.size(); ++i) {
      const Param& p = *model.params[i];
      if (p.layer_index != layer) continue;
      const std::string what = name + " " + when + " " + p.name;
      if (!p.fp8_weight) {
        expect(same_bytes(p.value, ref.value[i]), what + ": the value as initialised");
        continue;
      }
      expect(!p.value.defined(), what + ": no working-dtype value gathered");
      expect(same_bytes(p.fp8_q, ref.q[i]), what + ": codes of the whole weight's cast");
      Tensor s = clone(ref.scale[i]);
      ops::scale(s, factor);
      expect(same_bytes(p.fp8_scale, s), what + ": scales of the whole weight's cast");
    }
  };
  auto pass = [&](float factor, const std::string& when) {
    const std::vector<int>& layers = layout.layers();
    for (size_t i = 0; i < layers.size(); ++i) {
      gather.before(layers[i], /*backward=*/false);
      check_layer(layers[i], factor, when + " forward");
      gather.after(layers[i], /*backward=*/false, /*last_micro=*/false);
    }
    for (size_t i = layers.size(); i-- > 0;) {
      gather.before(layers[i], /*backward=*/true);
      check_layer(layers[i], factor, when + " backward");
      gather.after(layers[i], /*backward=*/true, /*last_micro=*/true);
    }
  };
  pass(1.0f, "step 1");
  const int64_t bytes = gather.gathered_bytes();
  if (fp8) {
    // The update doubles every weight (exact): the codes stay, the scales double.
    ops::scale(shard, 2.0f);
    gather.weights_changed();
    for (auto& v : ref.value) ops::scale(v, 2.0f);
    gather.release_all();
    pass(2.0f, "after an update");
  }
  gather.release_all();
  // A step's gathers: a byte per element of the FP8 units, the working dtype for the rest, plus at
  // most every rank's padded share of an FP8 unit's other parameters (and their unpacked copy).
  int64_t fp8_units = 0, other_units = 0, others = 0;
  for (const ZeroUnit& u : layout.units()) {
    bool has = false;
    for (int pi : u.params) has = has || layout.params()[static_cast<size_t>(pi)]->fp8_weight;
    (has ? fp8_units : other_units) += u.padded;
    for (int pi : u.params)
      if (has && !layout.params()[static_cast<size_t>(pi)]->fp8_weight)
        others += layout.params()[static_cast<size_t>(pi)]->numel();
  }
  const int64_t w = static_cast<int64_t>(dtype_size(dt));
  const int64_t lo = fp8_units + w * other_units, hi = lo + w * world.size() * others;
  if (fp8)
    expect(bytes >= lo && bytes <= hi, name + ": gathered " + std::to_string(bytes) + " bytes, expected " +
                                           std::to_string(lo) + " .. " + std::to_string(hi));
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    auto world = MpiCommunicator::world();
    for (DType dt : {DType::F32, DType::BF16})
      for (ops::Fp8Scaling s : {ops::Fp8Scaling::Tensorwise, ops::Fp8Scaling::Blocks128}) {
        const std::string name = std::string(dtype_name(dt)) +
                                 (s == ops::Fp8Scaling::Tensorwise ? " tensorwise" : " 128x128");
        const int64_t fp8 = run(*world, dt, true, s, name);
        const int64_t plain = run(*world, dt, false, s, name + " (working dtype)");
        // bf16: each FP8 weight's 2 bytes become 1; the norm, biases and head stay.
        const double ratio = static_cast<double>(fp8) / static_cast<double>(plain);
        if (world->rank() == 0)
          std::printf("%s: gathered %lld bytes, %lld in the working dtype (%.3f)\n", name.c_str(),
                      static_cast<long long>(fp8), static_cast<long long>(plain), ratio);
        expect(ratio < (dt == DType::BF16 ? 0.55 : 0.3), name + ": FP8 gathers under half the bf16 bytes");
      }
  }
  int total = 0, rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  if (total == 0 && rank == 0) std::printf("zero_fp8_gather_test: passed\n");
  return total == 0 ? 0 : 1;
}
