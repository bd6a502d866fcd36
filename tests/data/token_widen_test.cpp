// The CPU twin of the widening kernel, by hand: rows at odd byte offsets, uint16 and uint32 ids,
// overlapping rows of one run, per-row vocabulary limits, and the smallest bad index.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "data/token_widen.h"

namespace tetra::data {
namespace {

template <class T>
void put(std::vector<unsigned char>& bytes, size_t at, T v) {
  std::memcpy(bytes.data() + at, &v, sizeof v);
}

TEST(TokenWiden, RowsAtAnyOffsetWidenToInputsAndTargets) {
  const int64_t T = 3;
  for (int width : {2, 4}) {
    std::vector<unsigned char> staging(64, 0xEE);
    // Row 0 at byte 1 (odd), row 1 at byte 1 + T·width (the same run: it shares row 0's last id),
    // row 2 alone at byte 37 (uint16) or 33 (uint32).
    const std::vector<uint32_t> run = {10, 11, 12, 13, 14, 15, 16}, alone = {40, 41, 42, 43};
    for (size_t i = 0; i < run.size(); ++i)
      width == 2 ? put<uint16_t>(staging, 1 + 2 * i, static_cast<uint16_t>(run[i])) : put<uint32_t>(staging, 1 + 4 * i, run[i]);
    for (size_t i = 0; i < alone.size(); ++i)
      width == 2 ? put<uint16_t>(staging, 37 + 2 * i, static_cast<uint16_t>(alone[i])) : put<uint32_t>(staging, 33 + 4 * i, alone[i]);
    const std::vector<StagedRow> rows = {{1, 100}, {1 + T * width, 100}, {width == 2 ? 37 : 33, 0}};
    std::vector<int32_t> inputs(9, -1), targets(9, -1);
    EXPECT_EQ(widen_tokens(staging.data(), width, rows.data(), 3, T, inputs.data(), targets.data()), -1);
    EXPECT_EQ(inputs, (std::vector<int32_t>{10, 11, 12, 13, 14, 15, 40, 41, 42}));
    EXPECT_EQ(targets, (std::vector<int32_t>{11, 12, 13, 14, 15, 16, 41, 42, 43}));
    // Check only.
    EXPECT_EQ(widen_tokens(staging.data(), width, rows.data(), 3, T, nullptr, nullptr), -1);
    // Row limits: row 1 allows ids < 15, so its id 15 (position 2) and 16 (position 3) are bad; the
    // smallest flat index is 1·(T + 1) + 2 = 6. Row 2's limit 0 means the int32 range.
    std::vector<StagedRow> tight = rows;
    tight[1].limit = 15;
    EXPECT_EQ(widen_tokens(staging.data(), width, tight.data(), 3, T, inputs.data(), targets.data()), 6);
    EXPECT_EQ(staged_id(staging.data(), width, tight.data(), T, 6), 15u);
    if (width == 4) {
      put<uint32_t>(staging, 33 + 4, 0x80000000u);  // 2^31 in row 2: outside int32
      EXPECT_EQ(widen_tokens(staging.data(), width, rows.data(), 3, T, nullptr, nullptr), 2 * (T + 1) + 1);
    }
  }
}

}  // namespace
}  // namespace tetra::data
