// Checksums of checkpoint files: CRC-32 (the IEEE 802.3 / zlib polynomial, so `python3 -c
// "import zlib; ..."` can check a file by hand), computed with slicing-by-8 tables (~2 GB/s), and
// the size and CRC of a whole file read back from disk.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tetra::launch {

// CRC-32 of `bytes` continuing from `crc` (0 for a fresh checksum): crc32(crc32(0, a), b) = crc32(0, ab).
uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);

struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

// Reads the file at `path` to its end (4 MiB at a time). Throws a Checkpoint error naming the
// file when it cannot be opened or read.
FileDigest digest_file(const std::string& path);

// "cbf43926": the 8 lower-case hex digits meta.json stores.
std::string crc32_hex(uint32_t crc);

}  // namespace tetra::launch
