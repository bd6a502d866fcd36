#include "data/llmc_bin_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace tetra::data {

// The header and tokens are little-endian on disk and read without byte swapping.
static_assert(std::endian::native == std::endian::little, "llm.c shards are read on little-endian hosts only");

LlmcBinDataset::LlmcBinDataset(const std::string& path) : TokenDataset(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) TETRA_FAIL(Data, "cannot open llm.c shard ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    TETRA_FAIL(Data, "cannot stat llm.c shard ", path, ": ", std::strerror(err));
  }
  const int64_t file_bytes = static_cast<int64_t>(st.st_size);
  // From here on, a failure must still close the descriptor: the destructor does not run when the
  // constructor throws.
  try {
    if (file_bytes < kHeaderBytes)
      TETRA_FAIL(Data, "llm.c shard ", path, " is truncated: ", file_bytes, " bytes, shorter than its ", kHeaderBytes,
                 "-byte header");
    int32_t header[kHeaderWords];
    pread_exact(header, kHeaderBytes, 0, "header");
    if (header[0] != kMagic)
      TETRA_FAIL(Data, "llm.c shard ", path, " has wrong magic number ", header[0], " (expected ", kMagic, ")");
    if (header[1] != kVersion)
      TETRA_FAIL(Data, "llm.c shard ", path, " has version ", header[1], "; tetra reads version ", kVersion,
                 " (uint16 tokens) only");
    const int64_t count = header[2];
    if (count <= 0)
      TETRA_FAIL(Data, "llm.c shard ", path, " has token count ", count, " in its header; expected a positive count");
    const int64_t have = (file_bytes - kHeaderBytes) / 2;
    if (count > have)
      TETRA_FAIL(Data, "llm.c shard ", path, " is truncated: its header says ", count, " tokens (",
                 kHeaderBytes + 2 * count, " bytes) but the file has ", file_bytes, " bytes (", have,
                 " tokens); re-download or re-create it");
    if (file_bytes != kHeaderBytes + 2 * count)
      TETRA_FAIL(Data, "llm.c shard ", path, " has ", file_bytes - kHeaderBytes - 2 * count,
                 " bytes after the ", count, " tokens its header declares; the header or the file is corrupt");
    size_ = count;
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
  token_dtype_ = DType::U16;
  vocab_size_ = 0;  // not stored in the format
  tokenizer_ = "";
  contiguous_offset_ = kHeaderBytes;
}

LlmcBinDataset::~LlmcBinDataset() {
  if (fd_ >= 0) ::close(fd_);
}

void LlmcBinDataset::pread_exact(void* dst, int64_t bytes, int64_t at, const char* what) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    ssize_t got = ::pread(fd_, p, static_cast<size_t>(bytes), static_cast<off_t>(at));
    if (got < 0) {
      if (errno == EINTR) continue;
      TETRA_FAIL(Data, "cannot read the ", what, " of llm.c shard ", path_, " at byte ", at, ": ",
                 std::strerror(errno));
    }
    if (got == 0)
      TETRA_FAIL(Data, "llm.c shard ", path_, " ended early while reading its ", what, " at byte ", at,
                 " (was the file truncated while open?)");
    p += got;
    at += got;
    bytes -= got;
  }
}

void LlmcBinDataset::read_ids(int64_t offset, int64_t count, int32_t* out) {
  if (staging_.size() < static_cast<size_t>(count)) staging_.resize(static_cast<size_t>(count));
  pread_exact(staging_.data(), 2 * count, kHeaderBytes + 2 * offset, "tokens");
  for (int64_t i = 0; i < count; ++i) out[i] = staging_[static_cast<size_t>(i)];
}

}  // namespace tetra::data
