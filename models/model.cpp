#include "models/model.h"

#include <charconv>
#include <cstdlib>
#include <unordered_set>

namespace tetra {

double decimal_of(float f) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf - 1, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

std::vector<Param*> Model::params() {
  std::vector<Param*> out;
  std::unordered_set<Param*> seen;
  for (Layer* l : layers())
    for (Param* p : l->params())
      if (seen.insert(p).second) out.push_back(p);
  return out;
}

std::vector<MoeMlp*> Model::moe_layers() {
  std::vector<MoeMlp*> out;
  for (Layer* l : layers())
    if (MoeMlp* m = l->moe()) out.push_back(m);
  return out;
}

void Model::set_tensor_parallel(TensorParallel* tp, const TensorParallelPlan&) {
  if (tp && tp->size() > 1)
    TETRA_FAIL(Config, "parallel.tp: the ", arch(), " model has no tensor-parallel layers yet (use parallel.tp: 1)");
}

}  // namespace tetra
