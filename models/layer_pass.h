// LayerPass: one micro-batch's forward or backward through a run of layers, phase by phase
// (Layer::forward_phase / backward_phase), so that an executor can interleave two passes: run one
// up to its next communication point, then the other while the first one's collective is in
// flight (ARCHITECTURE.md §3 "Mixture of experts"; docs/moe.md). A MoE layer's phases end at its
// expert-parallel exchanges (dispatch, combine); layers without communication run as one phase.
//
// Hooks run around every layer — the optimizer's before/after hooks (ZeRO gathers and gradient
// reductions); in backward, `after` follows the layer's backward_weight. When two passes of the same
// direction go through the same layers together (the two-micro-batch interleave), the leading pass
// calls `before` and the trailing one `after`, so a layer's weights are gathered once for both and
// its gradients reduced after both (interleave() keeps the leader ahead: it never enters a layer
// after the trailer, never leaves it later). Every pass computes exactly what it would alone and
// accumulates weight gradients in the same order (the leading micro-batch first), so the results
// are bit for bit those of running the passes one after the other.
#pragma once
#include <functional>
#include <vector>

#include "models/layer.h"

namespace tetra {

class LayerPass {
 public:
  enum class Direction { Forward, Backward };
  using Hook = std::function<void(int layer)>;  // Layer::index()
  struct Hooks {
    Hook before, after;  // either may be empty
  };

  // `layers` in model order (a backward pass runs them in reverse). `input`: the first layer's input
  // (forward: the token ids) or the last layer's output gradient (backward: may be undefined, as for
  // a loss layer). weights (backward): each layer's backward_weight follows its input gradient
  // (false: the input gradients only, a zero-bubble schedule's B; `after` is then not called).
  LayerPass(std::vector<Layer*> layers, MicroBatchContext& ctx, Direction direction, Tensor input, Hooks hooks,
            bool weights = true);

  // Runs phases until one ends with a collective in flight (a phase that is not its layer's last) or
  // the pass ends. Returns whether phases remain.
  bool advance();
  bool done() const { return layer_ >= layers_.size(); }
  // Runs the whole pass.
  void run() {
    while (advance()) {
    }
  }
  // After done(): the last layer's output (forward) or the first layer's input gradient (backward).
  const Tensor& result() const { return value_; }
  MicroBatchContext& context() { return ctx_; }

 private:
  Layer* current() const;
  int phases(Layer* l) const;
  std::vector<Layer*> layers_;
  MicroBatchContext& ctx_;
  Direction direction_;
  Tensor value_;    // the current layer's input (forward) / output gradient (backward); the result at the end
  Hooks hooks_;
  bool weights_ = true;
  size_t layer_ = 0;  // position in the pass
  int phase_ = 0;     // next phase of the current layer
};

// Runs two passes to their end, alternating at their communication points: a, b, a, b, ... The passes
// must use different contexts. With the same layers and direction, give a the leader's hooks (before
// only) and b the trailer's (after only), as LayerPass says.
void interleave(LayerPass& a, LayerPass& b);

}  // namespace tetra
