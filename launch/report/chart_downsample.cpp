// The per-column reduction of chart series (M4: first, min, max, last per pixel column).
#include "launch/report/chart_downsample.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"

namespace tetra::launch {

MinMaxReducer::MinMaxReducer(double x0, double x1, int columns) : x0_(x0), columns_(columns) {
  TETRA_CHECK(columns > 0, "a chart needs at least one pixel column, got ", columns);
  scale_ = x1 > x0 ? columns / (x1 - x0) : 0.0;
}

int MinMaxReducer::column_of(double x) const {
  const double c = std::floor((x - x0_) * scale_);
  if (!(c >= 0)) return 0;  // also NaN
  return c >= columns_ ? columns_ - 1 : static_cast<int>(c);
}

void MinMaxReducer::close_column() {
  if (!open_) return;
  if (broken_ || out_.runs.empty()) {
    out_.runs.emplace_back();
    broken_ = false;
  }
  out_.runs.back().push_back(cur_);
  open_ = false;
}

void MinMaxReducer::gap() {
  close_column();
  broken_ = true;
}

void MinMaxReducer::add(double x, double y) {
  if (!std::isfinite(y) || std::isnan(x)) {
    gap();
    return;
  }
  const int col = column_of(x);
  if (open_ && col != cur_.column) close_column();
  if (!open_) {
    cur_ = ReducedColumn{col, y, y, y, y, true, 0};
    open_ = true;
  } else {
    if (y < cur_.min) {
      cur_.min = y;
      cur_.min_before_max = false;  // the newest extreme comes last
    }
    if (y > cur_.max) {
      cur_.max = y;
      cur_.min_before_max = true;
    }
    cur_.last = y;
  }
  cur_.points += 1;
  if (out_.points == 0) {
    out_.min = out_.max = y;
  } else {
    out_.min = std::min(out_.min, y);
    out_.max = std::max(out_.max, y);
  }
  out_.points += 1;
}

ReducedSeries MinMaxReducer::finish() {
  close_column();
  broken_ = true;
  return std::move(out_);
}

}  // namespace tetra::launch
