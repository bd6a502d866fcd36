#include "data/blend_schedule.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>

#include "runtime/error.h"

namespace tetra::data {

BlendSchedule::BlendSchedule(std::vector<double> weights) {
  TETRA_CHECK(!weights.empty(), "a blend needs at least one dataset");
  TETRA_CHECK(weights.size() <= 65535, "a blend of ", weights.size(), " datasets (at most 65535)");
  double sum = 0;
  for (double w : weights) {
    TETRA_CHECK(std::isfinite(w) && w > 0, "blend weight ", w, " (weights must be positive and finite)");
    sum += w;
  }
  const size_t n = weights.size();
  per_period_.assign(n, 0);
  if (n == 1) {
    per_period_[0] = kPeriod;
    return;
  }
  // Slots per period: w_d / Σw · P rounded by largest remainder (ties to the lower index), so they
  // sum to P exactly. From here on everything is integer arithmetic: the schedule has no rounding.
  std::vector<double> exact(n);
  int64_t given = 0;
  for (size_t d = 0; d < n; ++d) {
    exact[d] = weights[d] / sum * static_cast<double>(kPeriod);
    per_period_[d] = static_cast<int64_t>(std::floor(exact[d]));
    given += per_period_[d];
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return exact[a] - std::floor(exact[a]) > exact[b] - std::floor(exact[b]);
  });
  for (size_t k = 0; given < kPeriod; ++k, ++given) ++per_period_[order[k % n]];
  for (size_t d = 0; d < n; ++d)
    if (per_period_[d] == 0)
      TETRA_FAIL(Config, "blend weight ", weights[d], " of dataset ", d + 1, " is below 1/", kPeriod,
                 " of the total: it would never be drawn; raise it or drop the dataset");

  // Greedy interleave: offset i goes to the largest deficit n_d·(i + 1) − c_d·P (the share it is
  // owed, in units of 1/P slot), ties to the lower index.
  source_.resize(kPeriod);
  rank_.resize(kPeriod);
  std::vector<int64_t> count(n, 0);
  for (int64_t i = 0; i < kPeriod; ++i) {
    size_t best = 0;
    int64_t best_deficit = INT64_MIN;
    for (size_t d = 0; d < n; ++d) {
      const int64_t deficit = per_period_[d] * (i + 1) - count[d] * kPeriod;
      if (deficit > best_deficit) best_deficit = deficit, best = d;
    }
    source_[static_cast<size_t>(i)] = static_cast<uint16_t>(best);
    rank_[static_cast<size_t>(i)] = static_cast<uint32_t>(count[best]++);
  }
  for (size_t d = 0; d < n; ++d)
    TETRA_CHECK(count[d] == per_period_[d], "blend period: dataset ", d, " drawn ", count[d], " times, owed ",
                per_period_[d]);
}

BlendSlot BlendSchedule::at(int64_t slot) const {
  TETRA_CHECK(slot >= 0, "negative slot ", slot);
  if (source_.empty()) return {0, slot};
  const int64_t period = slot / kPeriod, offset = slot % kPeriod;
  const int d = source_[static_cast<size_t>(offset)];
  return {d, period * per_period_[static_cast<size_t>(d)] + rank_[static_cast<size_t>(offset)]};
}

}  // namespace tetra::data
