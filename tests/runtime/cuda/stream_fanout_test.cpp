// The fan-out of device work over side streams (runtime/stream_fanout.h) on a GPU: pieces run on the
// home stream and the side streams, after the work issued before the fan-out and before the work
// issued after it; a piece that throws stops the rest and leaves the streams joined; a fan-out inside
// a piece runs on that piece's lane; a fan-out captured into a CUDA graph replays to the same values.
//
// The ordering checks need the home stream's work to be slow next to the host issuing it: 192 adds
// over 32 M floats (≈ 50 ms of HBM traffic on an H100) are issued in well under a millisecond, so a
// side stream that did not wait on the fork would read x long before the adds end, and a home stream
// that did not wait on the join would copy the pieces' outputs before their 64 adds end.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "runtime/cuda_graph.h"
#include "runtime/stream_fanout.h"
#include "tests/runtime/cuda/gpu_test_util.h"

namespace tetra::gputest {
namespace {

constexpr int64_t kElems = int64_t{32} << 20;
constexpr int kHomeAdds = 192;
constexpr int kPieceAdds = 64;

// x = value, then kHomeAdds times x += one, on the current stream.
Tensor slow_ramp(float value) {
  Tensor x = Tensor::empty({kElems}, DType::F32, gpu());
  Tensor one = Tensor::empty({kElems}, DType::F32, gpu());
  ops::fill(x, value);
  ops::fill(one, 1.0f);
  for (int i = 0; i < kHomeAdds; ++i) ops::add(x, x, one);
  return x;
}

// y = x, then kPieceAdds times y += x: y = (kPieceAdds + 1)·x.
void piece_work(Tensor& y, const Tensor& x) {
  ops::copy(y, x);
  for (int i = 0; i < kPieceAdds; ++i) ops::add(y, y, x);
}

// Every element of `dev` (F32) equals `want` (exact: small integers in fp32).
void expect_all(const Tensor& dev, float want, const char* what) {
  Tensor h = download_raw(dev);
  const float* p = h.data<float>();
  int64_t bad = 0;
  for (int64_t i = 0; i < h.numel(); ++i) bad += p[i] != want;
  EXPECT_EQ(bad, 0) << what << ": elements differ from " << want << " (first: " << p[0] << ", last: " << p[h.numel() - 1]
                    << ")";
}

// n pieces, piece i writing outs[i] from x (piece_work) and noting the stream it was issued on in
// seen[i]; copies[i] for the test's copies of outs[i] on the home stream.
struct FanoutCase {
  std::vector<Tensor> outs, copies;
  std::vector<Stream> seen;
  std::vector<DevicePiece> pieces;
  FanoutCase(int n, const Tensor& x) : outs(n), copies(n), seen(n) {
    for (int i = 0; i < n; ++i) {
      outs[i] = Tensor::empty({kElems}, DType::F32, gpu());
      copies[i] = Tensor::empty({kElems}, DType::F32, gpu());
      pieces.push_back([this, i, &x] {
        seen[i] = current_stream(gpu());
        piece_work(outs[i], x);
      });
    }
  }
  FanoutCase(const FanoutCase&) = delete;  // the pieces point at this object
  void copy_outputs(int n) {
    for (int i = 0; i < n; ++i) ops::copy(copies[i], outs[i]);
  }
};

TEST(GpuStreamFanout, PiecesRunOnTheLanesBetweenForkAndJoin) {
  TETRA_REQUIRE_GPU();
  const Device d = gpu();
  StreamGuard on(Stream::create(d));
  const Stream home = current_stream(d);
  Tensor x = slow_ramp(1.0f);  // 1 + 192 = 193
  FanoutCase c(4, x);
  run_fanned_out(d, 4, c.pieces);
  EXPECT_TRUE(current_stream(d) == home) << "the home stream is current again after the fan-out";
  c.copy_outputs(4);  // on home: must follow the pieces
  EXPECT_TRUE(c.seen[0] == home) << "piece 0 runs on the home stream";
  for (int i = 1; i < 4; ++i) {
    EXPECT_FALSE(c.seen[i] == home) << "piece " << i << " runs on a side stream";
    for (int j = 1; j < i; ++j) EXPECT_FALSE(c.seen[i] == c.seen[j]) << "pieces " << j << " and " << i;
  }
  for (int i = 0; i < 4; ++i) expect_all(c.copies[i], 65.0f * 193.0f, "a piece's output copied after the join");
}

TEST(GpuStreamFanout, MorePiecesThanLanesTakeTheLanesInTurn) {
  TETRA_REQUIRE_GPU();
  const Device d = gpu();
  StreamGuard on(Stream::create(d));
  Tensor x = slow_ramp(2.0f);  // 194
  FanoutCase c(5, x);
  run_fanned_out(d, 2, c.pieces);
  c.copy_outputs(5);
  EXPECT_TRUE(c.seen[0] == c.seen[2] && c.seen[2] == c.seen[4]) << "pieces 0, 2, 4 share lane 0";
  EXPECT_TRUE(c.seen[1] == c.seen[3]) << "pieces 1 and 3 share lane 1";
  EXPECT_FALSE(c.seen[0] == c.seen[1]);
  for (int i = 0; i < 5; ++i) expect_all(c.copies[i], 65.0f * 194.0f, "a piece's output copied after the join");
}

TEST(GpuStreamFanout, AThrowingPieceStopsTheRestAndLeavesTheStreamsJoined) {
  TETRA_REQUIRE_GPU();
  const Device d = gpu();
  StreamGuard on(Stream::create(d));
  const Stream home = current_stream(d);
  Tensor x = slow_ramp(0.0f);  // 192
  FanoutCase c(2, x);
  bool later_ran = false;
  c.pieces.push_back([] { throw std::runtime_error("piece 2 failed"); });
  c.pieces.push_back([&] { later_ran = true; });
  EXPECT_THROW(run_fanned_out(d, 4, c.pieces), std::runtime_error);
  EXPECT_FALSE(later_ran) << "the piece after the failed one is not issued";
  EXPECT_TRUE(current_stream(d) == home);
  c.copy_outputs(2);
  for (int i = 0; i < 2; ++i) expect_all(c.copies[i], 65.0f * 192.0f, "a piece issued before the failure, joined");
  // The lanes are free again: the next fan-out uses a side stream.
  Stream second;
  const DevicePiece again[] = {[] {}, [&] { second = current_stream(d); }};
  run_fanned_out(d, 2, again);
  EXPECT_FALSE(second == home) << "a fan-out after a failed one runs on the side streams again";
}

TEST(GpuStreamFanout, AFanoutInsideAPieceRunsOnThatPiecesLane) {
  TETRA_REQUIRE_GPU();
  const Device d = gpu();
  StreamGuard on(Stream::create(d));
  std::vector<Stream> outer(2), inner(4);
  const DevicePiece pieces[] = {[&] {
                                  outer[0] = current_stream(d);
                                  const DevicePiece nested[] = {[&] { inner[0] = current_stream(d); },
                                                                [&] { inner[1] = current_stream(d); }};
                                  run_fanned_out(d, 2, nested);
                                },
                                [&] {
                                  outer[1] = current_stream(d);
                                  const DevicePiece nested[] = {[&] { inner[2] = current_stream(d); },
                                                                [&] { inner[3] = current_stream(d); }};
                                  run_fanned_out(d, 2, nested);
                                }};
  run_fanned_out(d, 2, pieces);
  EXPECT_TRUE(inner[0] == outer[0] && inner[1] == outer[0]);
  EXPECT_TRUE(inner[2] == outer[1] && inner[3] == outer[1]);
  EXPECT_FALSE(outer[0] == outer[1]);
}

TEST(GpuStreamFanout, ACapturedFanoutReplaysToTheSameValues) {
  TETRA_REQUIRE_GPU();
  const Device d = gpu();
  StreamGuard on(Stream::create(d));
  Tensor x = Tensor::empty({kElems}, DType::F32, gpu());
  FanoutCase c(3, x);
  run_fanned_out(d, 3, c.pieces);  // the lanes exist before the capture (the warm-up step's part)
  CudaGraph graph(d);
  graph.begin_capture();
  run_fanned_out(d, 3, c.pieces);
  c.copy_outputs(3);
  graph.end_capture();
  for (float v : {3.0f, 5.0f}) {
    ops::fill(x, v);
    for (int i = 0; i < 3; ++i) ops::fill(c.copies[i], -1.0f);
    graph.replay();
    for (int i = 0; i < 3; ++i) expect_all(c.copies[i], 65.0f * v, "a replayed piece's output");
  }
}

}  // namespace
}  // namespace tetra::gputest
