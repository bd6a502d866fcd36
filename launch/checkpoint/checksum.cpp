#include "launch/checkpoint/checksum.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "launch/checkpoint/files.h"
#include "runtime/error.h"

namespace tetra::launch {

namespace {

// tables[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b)
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  return t;
}

const Tables& tables() {
  static const Tables t = make_tables();
  return t;
}

}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes) {
  const Tables& t = tables();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (bytes >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian: the first byte is the lowest
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
        t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    bytes -= 8;
  }
  while (bytes--) c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

FileDigest digest_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    const int err = errno;
    if (err == ENOENT) TETRA_FAIL(Checkpoint, path, ": cannot open to checksum it: ", std::strerror(err));
    throw CheckpointUnreadable(path + ": cannot open to checksum it: " + std::strerror(err));
  }
  std::vector<unsigned char> buf(4u << 20);
  FileDigest d;
  for (;;) {
    size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    d.crc32 = crc32_update(d.crc32, buf.data(), n);
    d.bytes += n;
    if (n < buf.size()) {
      if (std::ferror(f.get()))
        throw CheckpointUnreadable(path + ": read error after " + std::to_string(d.bytes) +
                                   " bytes while checksumming: " + std::strerror(errno));
      break;
    }
  }
  return d;
}

std::string crc32_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

}  // namespace tetra::launch
