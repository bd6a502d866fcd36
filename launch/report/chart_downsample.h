// Reduces a long series to what a chart of W pixel columns can show (the "M4" reduction): per
// column the first, smallest, largest and last value, so the drawn line has the same extremes and
// the same ends in every column as the full series; no point is dropped from its column's min/max.
// Feed points in order of x; a NaN value or gap() breaks the line. O(1) per point, O(W) output.
#pragma once
#include <cstdint>
#include <vector>

namespace tetra::launch {

struct ReducedColumn {
  int column = 0;          // 0 .. columns-1
  double first = 0, min = 0, max = 0, last = 0;
  bool min_before_max = true;  // the order the extremes came in, so the line goes through them in turn
  int64_t points = 0;
};

// A connected piece of the line: consecutive columns (with no break between their points).
using ReducedRun = std::vector<ReducedColumn>;

struct ReducedSeries {
  std::vector<ReducedRun> runs;
  int64_t points = 0;  // points fed (finite values)
  double min = 0, max = 0;  // over every point fed (valid when points > 0)
};

class MinMaxReducer {
 public:
  // Columns split [x0, x1] evenly; points outside are clamped into the first or last column.
  MinMaxReducer(double x0, double x1, int columns);
  void add(double x, double y);
  void gap();  // the next point starts a new run
  ReducedSeries finish();

  int column_of(double x) const;

 private:
  void close_column();

  double x0_, scale_;
  int columns_;
  ReducedSeries out_;
  ReducedColumn cur_;
  bool open_ = false;     // cur_ holds points
  bool broken_ = true;    // the next point starts a new run
};

}  // namespace tetra::launch
