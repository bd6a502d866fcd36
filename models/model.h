// Model: an ordered list of layers plus the parameters they own. Parallel strategies are applied
// to a model from outside (ARCHITECTURE.md §9): they read params() and layers(), they don't
// change the model's code. A family (models/model_family.h) builds it from ModelArgs.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/layer.h"
#include "parallel/tensor/tensor_parallel.h"

namespace tetra {

struct TensorParallelPlan;

// One entry of the model's config as checkpoints carry it, under Hugging Face's name: HDF5
// attributes of a consolidated file, fields of an HF config.json. Loading compares the file's
// entries with the model's: a different Int or Bool is an error (the shapes or the wiring differ),
// a different Float (an epsilon, rope_theta) a note.
struct ModelAttribute {
  enum class Kind { Int, Float, Bool };
  std::string name;        // e.g. "num_key_value_heads"
  Kind kind = Kind::Int;
  double value = 0;
  // The config key that sets it, e.g. "model.n_kv_heads"; empty: no key does (the family runs only
  // this value, and a file with another is refused).
  std::string config_key;
};

// The shortest decimal of a float, as a double (1e-5f → 1e-05, not 9.99999974738e-06): how a
// config value kept as float is written into config.json and attributes.
double decimal_of(float f);

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string arch() const = 0;
  // Forward order; the first takes token ids, the last returns per-token losses.
  virtual std::vector<Layer*> layers() = 0;
  // Every parameter once (tied weights once), in forward order of first use.
  std::vector<Param*> params();
  virtual int64_t num_params() const = 0;
  virtual double flops_per_token(int64_t seq_len) const = 0;
  // The model config as checkpoints carry it (Hugging Face names), written into consolidated
  // checkpoints and Hugging Face folders and checked when loading one.
  virtual std::vector<ModelAttribute> config_attributes() const = 0;
  // Hugging Face config.json for this model: architectures, model_type and every field
  // transformers needs to build it.
  virtual nlohmann::json hf_config() const = 0;
  // Checkpoint names that are not parameters and may be ignored when loading (e.g. tied copies).
  virtual std::vector<std::string> ignorable_checkpoint_names() const { return {}; }
  // The mixture-of-experts MLPs of the layers, in layer order (empty for a dense model).
  std::vector<MoeMlp*> moe_layers();
  // Runs the layers tensor-parallel over `tp`'s group, each projection in the style `plan` (the
  // family's, which placed the parameters) gives it; parallelize() (models/parallelize.h) calls it.
  // Null, or a group of one rank: the plain layers. A family whose layers have no tensor-parallel
  // form fails with a Config error naming parallel.tp.
  virtual void set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan& plan);
};

}  // namespace tetra
