#include "models/model.h"

#include <unordered_set>

namespace tetra {

std::vector<Param*> Model::params() {
  std::vector<Param*> out;
  std::unordered_set<Param*> seen;
  for (Layer* l : layers())
    for (Param* p : l->params())
      if (seen.insert(p).second) out.push_back(p);
  return out;
}

}  // namespace tetra
