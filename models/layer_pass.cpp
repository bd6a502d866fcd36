#include "models/layer_pass.h"

#include <string>

#include "runtime/trace.h"

namespace tetra {

LayerPass::LayerPass(std::vector<Layer*> layers, MicroBatchContext& ctx, Direction direction, Tensor input,
                     Hooks hooks, bool weights)
    : layers_(std::move(layers)),
      ctx_(ctx),
      direction_(direction),
      value_(std::move(input)),
      hooks_(std::move(hooks)),
      weights_(weights) {}

Layer* LayerPass::current() const {
  return direction_ == Direction::Forward ? layers_[layer_] : layers_[layers_.size() - 1 - layer_];
}

// An evaluation's forward keeps nothing between phases: each layer runs whole.
int LayerPass::phases(Layer* l) const {
  if (direction_ == Direction::Backward) return l->backward_phases();
  return ctx_.training ? l->forward_phases() : 1;
}

bool LayerPass::advance() {
  const bool tracing = Tracer::instance().enabled();
  while (!done()) {
    Layer* l = current();
    const int n = phases(l);
    if (phase_ == 0 && hooks_.before) hooks_.before(l->index());
    const bool forward = direction_ == Direction::Forward;
    Tensor out;
    {
      const std::string what = tracing ? std::string(forward ? "F " : "B ") + l->name() +
                                             (n > 1 ? " phase " + std::to_string(phase_) : std::string())
                                       : std::string();
      TraceScope scope(what.c_str(), "layer");
      if (!forward)
        out = l->backward_phase(ctx_, value_, phase_);
      else
        out = ctx_.training ? l->forward_phase(ctx_, value_, phase_) : l->forward(ctx_, value_);
    }
    if (++phase_ < n) return true;  // this layer's collective is in flight: let the other pass run
    if (!forward && weights_) {
      TraceScope scope(tracing ? ("W " + l->name()).c_str() : "", "layer");
      l->backward_weight(ctx_);
    }
    if (hooks_.after && (forward || weights_)) hooks_.after(l->index());
    value_ = out;
    phase_ = 0;
    ++layer_;
  }
  return false;
}

void interleave(LayerPass& a, LayerPass& b) {
  bool more_a = !a.done(), more_b = !b.done();
  while (more_a || more_b) {
    if (more_a) more_a = a.advance();
    if (more_b) more_b = b.advance();
  }
}

}  // namespace tetra
