// The mesh section of the report page: pp × dp × tp ranks (tp fastest, ARCHITECTURE.md §4) drawn as
// one row of data-parallel replicas per pipeline stage, each replica a box of its tp ranks.
#include <algorithm>
#include <string>
#include <vector>

#include "launch/report/html_sections.h"
#include "launch/report/mesh_layout.h"
#include "launch/report/svg_chart.h"
#include "runtime/error.h"

namespace tetra::launch::html {

namespace {

constexpr int kCell = 30, kCellH = 22, kGap = 8, kMaxDrawn = 512;

std::string group_text(const std::vector<int>& g) {
  std::string s = "[";
  for (size_t i = 0; i < g.size(); ++i) {
    if (i == 8 && g.size() > 10) {
      s += ", … " + std::to_string(g.back());
      break;
    }
    s += (i ? ", " : "") + std::to_string(g[i]);
  }
  return s + "]";
}

std::string drawing(const MeshLayout& sh) {
  const int box_w = sh.tp * kCell + 6;
  const int per_line = std::max(1, (kPageWidth - 80) / (box_w + kGap));
  const int lines_per_stage = (sh.dp + per_line - 1) / per_line;
  const int line_h = kCellH + 6 + kGap;
  const int height = sh.pp * (lines_per_stage * line_h + 8) + 4;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"mesh\" width=\"" + std::to_string(kPageWidth) +
                  "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(kPageWidth) + " " +
                  std::to_string(height) + "\" role=\"img\" aria-label=\"ranks of the mesh\">";
  int y = 4;
  for (int p = 0; p < sh.pp; ++p) {
    s += "<text class=\"row-label\" x=\"70\" y=\"" + std::to_string(y + kCellH - 3) +
         "\" text-anchor=\"end\">stage " + std::to_string(p) + "</text>";
    for (int d = 0; d < sh.dp; ++d) {
      const int bx = 80 + (d % per_line) * (box_w + kGap), by = y + (d / per_line) * line_h;
      s += "<rect class=\"replica\" x=\"" + std::to_string(bx) + "\" y=\"" + std::to_string(by) + "\" width=\"" +
           std::to_string(box_w) + "\" height=\"" + std::to_string(kCellH + 6) + "\"><title>pp " + std::to_string(p) +
           ", dp " + std::to_string(d) + (sh.ep > 1 ? ", expert group " + std::to_string(d / sh.ep) : "") +
           "</title></rect>";
      for (int t = 0; t < sh.tp; ++t) {
        const int r = sh.rank_of(p, d, t);
        const MeshLayout::Coords c = sh.coords_of(r);
        const int cx = bx + 3 + t * kCell;
        s += "<rect class=\"rank e" + std::to_string(sh.ep > 1 ? c.ep % 4 : p % 2) + "\" x=\"" + std::to_string(cx) +
             "\" y=\"" + std::to_string(by + 3) + "\" width=\"" + std::to_string(kCell - 2) + "\" height=\"" +
             std::to_string(kCellH) + "\"><title>rank " + std::to_string(r) + ": pp " + std::to_string(c.pp) +
             ", dp " + std::to_string(c.dp) + ", tp " + std::to_string(c.tp) +
             (sh.ep > 1 ? ", ep " + std::to_string(c.ep) : "") + "</title></rect>";
        s += "<text class=\"rank-id\" x=\"" + std::to_string(cx + (kCell - 2) / 2) + "\" y=\"" +
             std::to_string(by + 3 + kCellH - 7) + "\" text-anchor=\"middle\">" + std::to_string(r) + "</text>";
      }
    }
    y += lines_per_stage * line_h + 8;
  }
  return s + "</svg>";
}

}  // namespace

std::string mesh(const Config& cfg, int world) {
  MeshLayout shape;
  shape.tp = cfg.parallel.tp;
  shape.pp = cfg.parallel.pp;
  shape.ep = cfg.parallel.ep;
  if (world <= 0) world = std::max(1, cfg.parallel.dp) * shape.tp * shape.pp;
  shape.dp = data_parallel_size(cfg.parallel, world);
  std::string s = "<p><b>world " + std::to_string(world) + "</b> = pp " + std::to_string(shape.pp) + " × dp " +
                  std::to_string(shape.dp) + " × tp " + std::to_string(shape.tp) + " (ep " + std::to_string(shape.ep) +
                  " inside dp; ranks numbered tp fastest, then dp, then pp) · ZeRO stage " +
                  std::to_string(cfg.parallel.zero_stage) + " · " + xml_escape(choice_name(cfg.train.device)) + ", " +
                  xml_escape(choice_name(cfg.train.precision)) + "</p>";
  if (shape.world() != world || shape.dp < 1 || shape.dp % shape.ep != 0)
    return s + "<p class=\"note warn\">The config's mesh (pp · dp · tp = " + std::to_string(shape.world()) +
           ") does not match the " + std::to_string(world) + " ranks the run had: not drawn.</p>";
  s += "<table class=\"groups\"><tr><th>axis</th><th>size</th><th>groups</th><th>rank 0's group</th>"
       "<th>the last rank's group</th></tr>";
  for (MeshLayout::Axis a : MeshLayout::kAxes) {
    if ((a == MeshLayout::Axis::EP || a == MeshLayout::Axis::ExpertDP) && shape.ep == 1)
      continue;  // expert groups only with ep > 1
    const std::vector<int> g0 = shape.group(a, 0), gl = shape.group(a, world - 1);
    s += "<tr><td>" + std::string(MeshLayout::name(a)) + "</td><td class=\"num\">" + std::to_string(g0.size()) +
         "</td><td class=\"num\">" + std::to_string(world / static_cast<int>(g0.size())) + "</td><td>" +
         group_text(g0) + "</td><td>" + group_text(gl) + "</td></tr>";
  }
  s += "</table>";
  if (world <= kMaxDrawn)
    s += drawing(shape);
  else
    s += "<p class=\"note\">" + std::to_string(world) + " ranks: too many to draw one by one.</p>";
  return s;
}

}  // namespace tetra::launch::html
