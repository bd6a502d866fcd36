// The report page's copy of the mesh numbering (launch/report/mesh_layout.h) against the mesh the
// trainer builds (parallel/mesh.h): the same coordinates and the same group along every axis.
#include <gtest/gtest.h>

#include "launch/report/mesh_layout.h"
#include "parallel/mesh.h"

namespace tetra::launch {
namespace {

TEST(MeshLayout, AgreesWithTheTrainersMesh) {
  const MeshShape shapes[] = {{1, 1, 1, 1}, {2, 4, 2, 2}, {3, 6, 1, 3}, {1, 8, 4, 4}, {4, 2, 3, 1}, {2, 12, 2, 6}};
  for (const MeshShape& shape : shapes) {
    const MeshLayout layout{shape.pp, shape.dp, shape.tp, shape.ep};
    ASSERT_EQ(layout.world(), shape.world());
    const Mesh mesh(shape, 0);
    for (int r = 0; r < shape.world(); ++r) {
      const MeshCoords c = mesh.coords_of(r);
      const MeshLayout::Coords l = layout.coords_of(r);
      EXPECT_EQ(std::vector<int>({l.pp, l.dp, l.tp, l.ep, l.edp}), std::vector<int>({c.pp, c.dp, c.tp, c.ep, c.edp}))
          << "rank " << r;
      EXPECT_EQ(layout.rank_of(c.pp, c.dp, c.tp), r);
      for (size_t a = 0; a < std::size(kMeshAxes); ++a) {
        EXPECT_STREQ(MeshLayout::name(MeshLayout::kAxes[a]), axis_name(kMeshAxes[a]));
        EXPECT_EQ(layout.group(MeshLayout::kAxes[a], r), mesh.group(kMeshAxes[a], r))
            << axis_name(kMeshAxes[a]) << " group of rank " << r << " in pp " << shape.pp << " dp " << shape.dp
            << " tp " << shape.tp << " ep " << shape.ep;
      }
    }
  }
}

}  // namespace
}  // namespace tetra::launch
