#include "launch/report/mesh_layout.h"

namespace tetra::launch {

const char* MeshLayout::name(Axis a) {
  switch (a) {
    case Axis::TP: return "tp";
    case Axis::DP: return "dp";
    case Axis::PP: return "pp";
    case Axis::EP: return "ep";
    case Axis::ExpertDP: return "expert_dp";
  }
  return "?";
}

MeshLayout::Coords MeshLayout::coords_of(int rank) const {
  Coords c;
  c.tp = rank % tp;
  c.dp = (rank / tp) % dp;
  c.pp = rank / (tp * dp);
  c.ep = c.dp % ep;
  c.edp = c.dp / ep;
  return c;
}

std::vector<int> MeshLayout::group(Axis axis, int rank) const {
  const Coords c = coords_of(rank);
  std::vector<int> g;
  switch (axis) {
    case Axis::TP:
      for (int t = 0; t < tp; ++t) g.push_back(rank_of(c.pp, c.dp, t));
      break;
    case Axis::DP:
      for (int d = 0; d < dp; ++d) g.push_back(rank_of(c.pp, d, c.tp));
      break;
    case Axis::PP:
      for (int p = 0; p < pp; ++p) g.push_back(rank_of(p, c.dp, c.tp));
      break;
    case Axis::EP:  // ep consecutive dp ranks
      for (int e = 0; e < ep; ++e) g.push_back(rank_of(c.pp, c.edp * ep + e, c.tp));
      break;
    case Axis::ExpertDP:  // same position inside every expert group
      for (int k = 0; k < dp / ep; ++k) g.push_back(rank_of(c.pp, k * ep + c.ep, c.tp));
      break;
  }
  return g;
}

}  // namespace tetra::launch
