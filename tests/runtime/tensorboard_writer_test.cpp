// The TensorBoard event writer's pieces (runtime/tensorboard_writer.h): CRC-32C against its
// published check values, the TFRecord framing of the first records, steps that may not go back,
// and the errors for a folder or a file that cannot be made. The events' protobuf fields are read
// by an independent Python reader in tests/launch/train/tensorboard_events.py.
#include "runtime/tensorboard_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "runtime/error.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tetra_tb_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

uint32_t u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(s[at + static_cast<size_t>(i)]);
  return v;
}

TEST(Crc32c, PublishedCheckValues) {
  // RFC 3720 (iSCSI) B.4 and the usual "123456789" check value of CRC-32C.
  const std::string digits = "123456789";
  EXPECT_EQ(crc32c(digits.data(), digits.size()), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  // Continuing an earlier value gives the CRC of the whole.
  EXPECT_EQ(crc32c(digits.data() + 4, 5, crc32c(digits.data(), 4)), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c(digits.data(), digits.size()), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoardWriter, FramesRecordsAndKeepsStepsInOrder) {
  const fs::path dir = scratch("frames") / "tensorboard";
  std::string path;
  {
    TensorBoardWriter w(dir.string(), 2, 7);
    path = w.path();
    EXPECT_NE(fs::path(path).filename().string().find("events.out.tfevents."), std::string::npos);
    EXPECT_EQ(path.substr(path.size() - 2), ".2");
    w.scalars(7, {{"train/loss", 1.5}});
    w.scalars(8, {{"train/loss", 1.25}, {"train/lr", 1e-3}});
    w.scalars(8, {{"goodput/goodput", 0.5}});  // the same step again: allowed
    EXPECT_THROW(w.scalars(6, {{"train/loss", 2.0}}), Error);
    EXPECT_EQ(w.last_step(), 8);
  }
  // Every record: length, masked CRC of the length, the event, masked CRC of the event.
  const std::string s = read_all(path);
  size_t at = 0, records = 0;
  while (at < s.size()) {
    ASSERT_LE(at + 12, s.size());
    uint64_t n = 0;
    std::memcpy(&n, s.data() + at, 8);  // little-endian hosts only, as the writer's callers
    EXPECT_EQ(u32(s, at + 8), masked_crc32c(s.data() + at, 8));
    ASSERT_LE(at + 12 + n + 4, s.size());
    EXPECT_EQ(u32(s, at + 12 + n), masked_crc32c(s.data() + at + 12, n));
    at += 12 + n + 4;
    ++records;
  }
  EXPECT_EQ(records, 5u);  // file version, SessionLog START, three summaries
  EXPECT_NE(s.find("brain.Event:2"), std::string::npos);
  fs::remove_all(dir.parent_path());
}

TEST(TensorBoardWriter, FolderThatCannotBeMadeIsADataError) {
  const fs::path base = scratch("blocked");
  fs::create_directories(base);
  std::ofstream(base / "file") << "x";
  try {
    TensorBoardWriter w((base / "file" / "tensorboard").string(), 1, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_NE(std::string(e.what()).find("log.tensorboard"), std::string::npos) << e.what();
  }
  fs::remove_all(base);
}

}  // namespace
}  // namespace tetra
