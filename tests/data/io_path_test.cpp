// The read path data.io chooses, and why: auto takes gds only with cuFile's direct path, raw files
// of one width and a CUDA device; explicit requests that cannot be served are refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "data/io_path.h"
#include "tests/data/data_fixtures.h"

namespace tetra::data {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

GdsProbe direct() { return {true, false, "nvidia-fs 2.20, direct DMA for: nvme"}; }
GdsProbe compat() { return {true, true, "cuFile in compatibility mode only (the nvidia-fs kernel driver is not loaded)"}; }
GdsProbe absent() { return {false, false, "tetra was built without cuFile"}; }
GdsProbe never() {
  ADD_FAILURE() << "the GDS probe ran where GDS was not in question";
  return {};
}

TEST(IoPath, AutoChoosesAndSaysWhy) {
  const std::vector<FileLayout> raw = {{"a.bin", true, 2}, {"b.h5", true, 2}};
  const std::vector<FileLayout> chunked = {{"a.bin", true, 2}, {"gz.h5", false, 4}};
  const std::vector<FileLayout> mixed = {{"a.bin", true, 2}, {"u32.h5", true, 4}};
  const Device gpu = Device::cuda(0), cpu = Device::cpu();

  IoChoice c = choose_io("auto", cpu, raw, never);
  EXPECT_EQ(c.path, IoPath::Posix);
  EXPECT_THAT(c.reason, HasSubstr("CPU backend"));
  c = choose_io("auto", gpu, raw, direct);
  EXPECT_EQ(c.path, IoPath::Gds);
  EXPECT_FALSE(c.compat_mode);
  EXPECT_THAT(c.reason, AllOf(HasSubstr("auto: gds"), HasSubstr("nvidia-fs 2.20")));
  c = choose_io("auto", gpu, chunked, never);
  EXPECT_EQ(c.path, IoPath::Pinned);
  EXPECT_THAT(c.reason, AllOf(HasSubstr("gz.h5"), HasSubstr("decode")));
  c = choose_io("auto", gpu, mixed, never);
  EXPECT_EQ(c.path, IoPath::Pinned);
  EXPECT_THAT(c.reason, AllOf(HasSubstr("uint16"), HasSubstr("u32.h5")));
  c = choose_io("auto", gpu, raw, absent);
  EXPECT_EQ(c.path, IoPath::Pinned);
  EXPECT_THAT(c.reason, HasSubstr("without cuFile"));
  c = choose_io("auto", gpu, raw, compat);
  EXPECT_EQ(c.path, IoPath::Pinned);
  EXPECT_THAT(c.reason, HasSubstr("compatibility mode"));
}

TEST(IoPath, ExplicitRequestsAreServedOrRefused) {
  const std::vector<FileLayout> raw = {{"a.bin", true, 2}};
  const std::vector<FileLayout> chunked = {{"gz.h5", false, 4}};
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  EXPECT_EQ(choose_io("posix", gpu, raw, never).path, IoPath::Posix);
  EXPECT_EQ(choose_io("pinned", gpu, chunked, never).path, IoPath::Pinned);  // HDF5 decodes into pinned memory
  IoChoice c = choose_io("pinned", cpu, raw, never);
  EXPECT_EQ(c.path, IoPath::Posix);
  EXPECT_THAT(c.reason, HasSubstr("CPU backend"));
  c = choose_io("gds", gpu, raw, compat);
  EXPECT_EQ(c.path, IoPath::Gds);
  EXPECT_TRUE(c.compat_mode);  // served, and said so
  EXPECT_THAT(c.reason, HasSubstr("compatibility mode"));
  EXPECT_THAT(testing::error_of([&] { choose_io("gds", gpu, chunked, never); }),
              AllOf(HasSubstr("gz.h5"), HasSubstr("data.io: gds")));
  EXPECT_THAT(testing::error_of([&] { choose_io("gds", gpu, raw, absent); }),
              AllOf(HasSubstr("not available"), HasSubstr("without cuFile")));
  EXPECT_THAT(testing::error_of([&] { choose_io("gds", cpu, raw, never); }), HasSubstr("on the CPU"));
  EXPECT_THAT(testing::error_of([&] { choose_io("fast", gpu, raw, never); }), HasSubstr("not one of"));
}

TEST(IoPath, ThisBuildReportsItsGdsSupport) {
  const GdsProbe p = gds_probe();
#ifndef TETRA_WITH_CUFILE
  EXPECT_FALSE(p.available);
  EXPECT_THAT(p.detail, HasSubstr("without"));
#else
  EXPECT_FALSE(p.detail.empty());
#endif
  EXPECT_FALSE(filesystem_of("/").empty());
}

}  // namespace
}  // namespace tetra::data
