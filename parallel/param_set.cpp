#include "parallel/param_set.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "parallel/param_placement.h"
#include "runtime/ops.h"
#include "runtime/random.h"

namespace tetra {

void ParamSet::build(std::vector<Param*> params, Device device, DType value_dtype, DType grad_dtype, int shards,
                     bool full_grads) {
  params_.clear();
  buffers_.clear();
  for (Param* p : params) (p->trainable ? params_ : buffers_).push_back(p);
  device_ = device;
  value_dtype_ = value_dtype;
  grad_dtype_ = grad_dtype;
  layout_ = ZeroLayout(params_, shards);
  for (size_t i = 0; i < layout_.params().size(); ++i) layout_.params()[i]->offset = layout_.offset_of(static_cast<int>(i));
  values_ = Tensor::zeros({layout_.total()}, value_dtype, device);
  grads_ = full_grads ? Tensor::zeros({layout_.total()}, grad_dtype, device) : Tensor();
  initial_ = Tensor();
  for (Param* p : params_) {
    p->value = values_.slice_flat(p->offset, p->local_shape);
    p->grad = full_grads ? grads_.slice_flat(p->offset, p->local_shape) : Tensor();
    p->grad_empty = p->grad_stale = false;  // zeros, but not yet of a step: the first step's zero_grads says so
  }
  for (Param* p : buffers_) {
    p->value = Tensor::zeros(p->local_shape, DType::F32, device);
    p->grad = Tensor();
  }
}

void ParamSet::adopt_flat_grads(Tensor grads) {
  TETRA_CHECK(grads_.defined(), "adopt_flat_grads: this ParamSet has no flat gradient buffer");
  TETRA_CHECK(grads.defined() && grads.numel() == grads_.numel() && grads.dtype() == grads_.dtype() &&
                  grads.device() == grads_.device(),
              "adopt_flat_grads: ", grads.defined() ? grads.describe() : std::string("undefined"),
              " cannot replace ", grads_.describe());
  ops::copy(grads, grads_);
  grads_ = std::move(grads);
  for (Param* p : params_) p->grad = grads_.slice_flat(p->offset, p->local_shape);
}

// Element i of a parameter's full tensor is drawn from a counter-based stream (seed, name, i), so
// the values do not depend on the order of parameters, on how a tensor is split (a tensor-parallel
// rank draws exactly the elements of its slice, parallel/param_placement.h), or on how many threads
// draw them: a 10B-parameter model initialises in seconds on a many-core host.
void ParamSet::initialize(uint64_t seed) {
  const unsigned threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<Param*> all = params_;
  all.insert(all.end(), buffers_.begin(), buffers_.end());
  for (Param* p : all) {
    // A tp slice draws its own elements of the full tensor; an expert-parallel slice is initialised
    // by expert parallelism (parallel/expert/placement.h).
    TETRA_CHECK(p->placement.ep.kind != AxisPlacement::Kind::Expert || p->local_shape == p->full_shape,
                "initialize: expert-parallel parameters are initialised by their strategy (", p->name, ")");
    TETRA_CHECK(p->value.defined(), "initialize: ", p->name, " has no value buffer (released by a sharded optimizer)");
    Tensor src = Tensor::empty(p->local_shape, DType::F32);
    float* host = src.data<float>();
    const int64_t n = p->numel();
    if (p->init_constant) {
      std::fill(host, host + n, p->init_value);
    } else {
      const uint64_t stream = seed ^ hash_name(p->name);
      const double std_dev = p->init_std;
      // Runs map contiguous stretches of the local tensor onto the full one.
      const std::vector<ElementRun> runs = local_runs(*p);
      auto fill = [&](int64_t begin, int64_t end) {
        if (begin >= end) return;
        auto run = std::upper_bound(runs.begin(), runs.end(), begin,
                                    [](int64_t i, const ElementRun& r) { return i < r.local; });
        for (--run; begin < end; ++run) {
          const int64_t stop = std::min(end, run->local + run->length);
          for (int64_t i = begin; i < stop; ++i)
            host[i] = static_cast<float>(normal_at(stream, static_cast<uint64_t>(run->full + (i - run->local))) *
                                         std_dev);
          begin = stop;
        }
      };
      const int64_t chunk = 1 << 20;
      if (n <= chunk || threads == 1) {
        fill(0, n);
      } else {
        std::vector<std::thread> pool;
        std::atomic<int64_t> next{0};
        for (unsigned t = 0; t < threads; ++t)
          pool.emplace_back([&] {
            for (int64_t b; (b = next.fetch_add(chunk)) < n;) fill(b, std::min(n, b + chunk));
          });
        for (auto& th : pool) th.join();
      }
    }
    ops::copy(p->value, src);
  }
}

void ParamSet::set_initial_values(const std::function<void()>& fill) {
  initial_ = Tensor();
  if (value_dtype_ == DType::F32) {
    fill();
    return;
  }
  TETRA_CHECK(values_.defined(), "set_initial_values: the value buffer was released by a sharded optimizer");
  Tensor host = Tensor::zeros({layout_.total()}, DType::F32, Device::cpu());
  auto bind = [&](Tensor& flat) {
    for (Param* p : params_) p->value = flat.slice_flat(p->offset, p->local_shape);
  };
  bind(host);
  try {
    fill();
  } catch (...) {
    bind(values_);
    throw;
  }
  bind(values_);
  // Per parameter, as each rounds on the device side through a scratch of its own size (padding
  // stays zero in both buffers).
  for (Param* p : params_) {
    Tensor src = host.slice_flat(p->offset, {p->numel()});
    Tensor dst = values_.slice_flat(p->offset, {p->numel()});
    ops::copy(dst, src);
  }
  initial_ = std::move(host);
}

void prepare_grads(Tensor& buf, int64_t begin, const std::vector<Param*>& params) {
  std::vector<Param*> skip;
  for (Param* p : params)
    if (p->grad_whole_writes) skip.push_back(p);
  if (skip.empty()) {
    ops::zero(buf);  // one memset
  } else {
    // The ranges between the skipped gradients (padding included).
    std::sort(skip.begin(), skip.end(), [](const Param* a, const Param* b) { return a->offset < b->offset; });
    const int64_t end = begin + buf.numel();
    int64_t at = begin;
    for (const Param* p : skip) {
      TETRA_CHECK(p->offset >= at && p->offset + p->numel() <= end, "prepare_grads: ", p->name, " at [", p->offset,
                  ", ", p->offset + p->numel(), ") is not inside [", begin, ", ", end, ") after the parameters before it");
      if (p->offset > at) {
        Tensor gap = buf.slice_flat(at - begin, {p->offset - at});
        ops::zero(gap);
      }
      at = p->offset + p->numel();
    }
    if (end > at) {
      Tensor gap = buf.slice_flat(at - begin, {end - at});
      ops::zero(gap);
    }
  }
  for (Param* p : params) {
    p->grad_empty = true;
    p->grad_stale = p->grad_whole_writes;
  }
}

void settle_grads(const std::vector<Param*>& params) {
  for (Param* p : params) {
    if (!p->grad_stale) continue;
    ops::zero(p->grad);
    p->grad_stale = false;
  }
}

void ParamSet::zero_grads() {
  if (grads_.defined()) prepare_grads(grads_, 0, params_);
}

void ParamSet::release_values() {
  values_ = Tensor();
  for (Param* p : params_) p->value = Tensor();
}

Param* ParamSet::find(const std::string& name) const {
  for (Param* p : params_)
    if (p->name == name) return p;
  for (Param* p : buffers_)
    if (p->name == name) return p;
  return nullptr;
}

}  // namespace tetra
