// The registry of model families (ARCHITECTURE.md §3 "Model families"): one spec per `model.arch`
// that builds the model from ModelArgs and says everything launch/ and parallel/ need without
// knowing the family: which config keys it takes, which shapes it rejects, its parameter count,
// FLOPs per token, activation memory, per-layer costs (pipeline stage splitting) and its
// tensor-parallel plan. Adding a family: docs/models.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/model_args.h"
#include "models/tensor_parallel_plan.h"

namespace tetra {

// What one Layer costs, in model order (embedding first, output layer last; names as Layer::name()).
struct LayerCost {
  std::string name;
  int64_t params = 0;          // parameters the layer owns (a tied matrix counts at its owner)
  // Forward FLOPs per token: 2 per multiply-add of every matrix product (the output layer's
  // included, tied or not) plus attention's 4·d·T at context T, as the 12·L·d·T of the model
  // FLOPs counts it; elementwise work and lookups are not counted. Backward ≈ 2× this.
  double forward_flops = 0;
  double activation_bytes = 0;  // what the layer keeps from forward to backward for one micro-batch
};

struct ParamCount {
  int64_t total = 0;   // every parameter once (tied weights once)
  int64_t active = 0;  // used per token (MoE: the routed experts' share); dense models: total
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual std::string arch() const = 0;         // the model.arch value
  virtual std::string description() const = 0;  // one line: what the family is
  // The model.* keys this family reads besides those every family takes (arch, vocab_size, seq_len,
  // d_model, n_layers, n_heads, init_from), without the section: {"n_kv_heads", "ffn_dim", ...}.
  virtual std::vector<std::string> config_keys() const = 0;

  // Throws ModelArgsError (naming the keys) for a shape the family cannot build, or cannot split
  // over `tp` tensor-parallel ranks (heads, vocabulary). build() validates with tp = 1.
  virtual void validate(const ModelArgs& args, int tp = 1) const = 0;
  virtual std::unique_ptr<Model> build(const ModelArgs& args) const = 0;

  virtual ParamCount param_count(const ModelArgs& args) const = 0;
  // Model FLOPs per token of training at context seq_len (MFU; ARCHITECTURE.md §7).
  virtual double flops_per_token(const ModelArgs& args, int64_t seq_len) const = 0;
  // Every Layer of build(args), in model order.
  virtual std::vector<LayerCost> layer_costs(const ModelArgs& args, const ActivationShape& shape) const = 0;
  // The transient memory of the largest layer's backward (gradients in flight), on top of what the
  // layers keep.
  virtual double backward_working_bytes(const ModelArgs& args, const ActivationShape& shape) const = 0;
  // Activations of one micro-batch in training: Σ layer_costs(...).activation_bytes + the
  // backward working set. `tetra plan` and the trainer's memory plan print it.
  double activation_bytes(const ModelArgs& args, const ActivationShape& shape) const;

  virtual TensorParallelPlan tensor_parallel_plan(const ModelArgs& args) const = 0;
  // One line for start-up and `tetra plan`: the shape in the family's own terms.
  virtual std::string describe(const ModelArgs& args) const = 0;
};

// The family of `arch`; throws ModelArgsError on model.arch naming the known families.
const ModelFamily& model_family(const std::string& arch);
// Every registered family's arch, in registration order.
std::vector<std::string> model_family_names();
// The model.* keys every family takes (without the section): arch, vocab_size, seq_len, d_model,
// n_layers, n_heads, init_from.
const std::vector<std::string>& common_model_keys();

// Checks every family shares (messages as launch/ has always printed them): d_model % n_heads (unless
// head_dim is given),
// heads and vocabulary against tp. Families call it from validate().
void validate_common_shape(const ModelArgs& args, int tp);
// Under an FP8 recipe (args.fp8): each named projection width a multiple of kFp8Multiple
// (models/fp8_linear.h), else ModelArgsError naming train.fp8.recipe and the width's key.
void validate_fp8_widths(const ModelArgs& args, const std::vector<std::pair<std::string, int64_t>>& widths);

}  // namespace tetra
