#include "models/layer.h"

namespace tetra {

Recompute recompute_from_name(const std::string& name) {
  if (name == "none") return Recompute::None;
  if (name == "mlp") return Recompute::Mlp;
  if (name == "full") return Recompute::Full;
  TETRA_FAIL(Config, "train.recompute: unknown mode '", name, "' (valid: none, mlp, full)");
}

}  // namespace tetra
