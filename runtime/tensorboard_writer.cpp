#include "runtime/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "runtime/error.h"

namespace tetra {

namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host() {
  char buf[256] = {0};
  return gethostname(buf, sizeof buf - 1) == 0 ? buf : "unknown";
}

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// Protobuf wire format: a field's key is (number << 3) | wire type; 0 varint, 1 fixed64,
// 2 length-delimited, 5 fixed32. Fixed-width values are little-endian.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void key(std::string& out, int field, int wire) { varint(out, static_cast<uint64_t>(field) << 3 | wire); }

template <typename T>
void little_endian(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void bytes_field(std::string& out, int field, const std::string& bytes) {
  key(out, field, 2);
  varint(out, bytes.size());
  out += bytes;
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary), session_log = 7 (SessionLog).
std::string event_head(int64_t step) {
  std::string e;
  uint64_t wall;
  const double now = unix_seconds();
  std::memcpy(&wall, &now, sizeof wall);
  key(e, 1, 1);
  little_endian(e, wall);
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  return e;
}

// Summary: repeated Value value = 1; Value: tag = 1 (string), simple_value = 2 (float).
std::string summary(const std::vector<std::pair<std::string, double>>& values) {
  std::string s;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes_field(value, 1, tag);
    const float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    key(value, 2, 5);
    little_endian(value, bits);
    bytes_field(s, 1, value);
  }
  return s;
}

std::string errno_message() { return std::strerror(errno); }

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TensorBoardWriter::dir_in(const std::string& run_dir) { return run_dir + "/tensorboard"; }

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int attempt, int64_t first_step)
    : last_step_(first_step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    TETRA_FAIL(Data, "cannot create the folder ", dir, " for TensorBoard's event files: ", ec.message(),
               "; check its permissions, or set log.tensorboard: false");
  char name[96];
  std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.", static_cast<long long>(unix_seconds()));
  path_ = dir + "/" + name + host() + "." + std::to_string(getpid()) + "." + std::to_string(attempt);
  file_ = std::fopen(path_.c_str(), "wbx");  // a new file, never one that exists
  if (!file_)
    TETRA_FAIL(Data, "cannot create ", path_, ": ", errno_message(),
               "; check free space and permissions, or set log.tensorboard: false");
  std::string version = event_head(first_step);
  bytes_field(version, 3, "brain.Event:2");
  record(version);
  // SessionLog: status = 1 (enum; START = 1).
  std::string start = event_head(first_step);
  std::string session_log;
  key(session_log, 1, 0);
  varint(session_log, 1);
  bytes_field(start, 7, session_log);
  record(start);
  if (std::fflush(file_) != 0)
    TETRA_FAIL(Data, "cannot write ", path_, ": ", errno_message(), "; check free space on its file system");
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  TETRA_CHECK(step >= last_step_, "TensorBoard event at step ", step, " after step ", last_step_, " in ", path_);
  last_step_ = step;
  std::string e = event_head(step);
  bytes_field(e, 5, summary(values));
  record(e);
  if (std::fflush(file_) != 0)
    TETRA_FAIL(Data, "cannot write ", path_, ": ", errno_message(), "; check free space on its file system");
}

void TensorBoardWriter::record(const std::string& event) {
  std::string r;
  little_endian(r, static_cast<uint64_t>(event.size()));
  little_endian(r, masked_crc32c(r.data(), 8));
  r += event;
  little_endian(r, masked_crc32c(event.data(), event.size()));
  if (std::fwrite(r.data(), 1, r.size(), file_) != r.size())
    TETRA_FAIL(Data, "cannot write ", path_, ": ", errno_message(), "; check free space on its file system");
}

}  // namespace tetra
