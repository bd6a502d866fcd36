// The fan-out of device work (runtime/stream_fanout.h) on the CPU, where every piece runs in order
// on the calling thread, and the TETRA_WGRAD_STREAMS setting. The GPU's lanes, fork and join:
// tests/runtime/cuda/stream_fanout_test.cpp.
#include "runtime/stream_fanout.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace tetra {
namespace {

TEST(StreamFanout, RunsEveryPieceInOrderOnTheCpu) {
  std::vector<int> order;
  std::vector<DevicePiece> pieces;
  for (int i = 0; i < 6; ++i) pieces.push_back([&order, i] { order.push_back(i); });
  run_fanned_out(Device::cpu(), 4, pieces);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  run_fanned_out(Device::cpu(), 4, std::vector<DevicePiece>{});  // nothing to run
}

TEST(StreamFanout, AThrowingPieceStopsTheRestAndIsRethrown) {
  std::vector<int> ran;
  const DevicePiece pieces[] = {[&] { ran.push_back(0); }, [] { throw std::runtime_error("piece 1"); },
                                [&] { ran.push_back(2); }};
  EXPECT_THROW(run_fanned_out(Device::cpu(), 3, pieces), std::runtime_error);
  EXPECT_EQ(ran, (std::vector<int>{0}));
}

TEST(StreamFanout, NeedsAtLeastOneLane) {
  const DevicePiece pieces[] = {[] {}};
  EXPECT_THROW(run_fanned_out(Device::cpu(), 0, pieces), Error);
}

TEST(StreamFanout, WeightGradWaysSetting) {
  EXPECT_EQ(weight_grad_ways_from(nullptr), 1);
  EXPECT_EQ(weight_grad_ways_from(""), 1);
  for (int n = 1; n <= kMaxFanoutWays; ++n) EXPECT_EQ(weight_grad_ways_from(std::to_string(n).c_str()), n);
  for (const char* bad : {"0", "5", "-1", "2x", "two", " 2"}) {
    try {
      weight_grad_ways_from(bad);
      ADD_FAILURE() << "accepted TETRA_WGRAD_STREAMS='" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Config);
      EXPECT_NE(std::string(e.what()).find("TETRA_WGRAD_STREAMS"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tetra
