// The process mesh as the report page draws it (launch/report/html_mesh.cpp), from the run's
// resolved config alone: world = pp × dp × tp ranks numbered tp fastest, then dp, then pp; within
// a dp group, ep consecutive dp ranks form an expert group, and the ranks at the same place in
// every expert group form an expert-data group (ARCHITECTURE.md §4). The numbering is
// parallel/mesh.h's; the report keeps this copy so that it reads run-directory files only, and
// tests/launch/report/mesh_layout_test.cpp checks that the two agree.
#pragma once
#include <vector>

namespace tetra::launch {

struct MeshLayout {
  int pp = 1, dp = 1, tp = 1, ep = 1;  // ep divides dp

  enum class Axis { TP, DP, PP, EP, ExpertDP };
  static constexpr Axis kAxes[] = {Axis::TP, Axis::DP, Axis::PP, Axis::EP, Axis::ExpertDP};
  static const char* name(Axis a);  // "tp", "dp", "pp", "ep", "expert_dp"

  struct Coords {
    int pp = 0, dp = 0, tp = 0;
    int ep = 0;   // index inside the expert group (dp mod ep)
    int edp = 0;  // index inside the expert-data group (dp div ep)
  };

  int world() const { return pp * dp * tp; }
  int rank_of(int p, int d, int t) const { return (p * dp + d) * tp + t; }
  Coords coords_of(int rank) const;
  // The ranks of `rank`'s group along an axis, in group order.
  std::vector<int> group(Axis axis, int rank) const;
};

}  // namespace tetra::launch
