// Model: an ordered list of layers plus the parameters they own. Parallel strategies are applied
// to a model from outside (ARCHITECTURE.md §9): they read params() and layers(), they don't
// change the model's code.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/layer.h"

namespace tetra {

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
  // Attributes written into consolidated checkpoints (the model config, as PyTorch names it).
  virtual std::vector<std::pair<std::string, int64_t>> config_attributes() const = 0;
  // Checkpoint names that are not parameters and may be ignored when loading (e.g. tied copies).
  virtual std::vector<std::string> ignorable_checkpoint_names() const { return {}; }
};

}  // namespace tetra
