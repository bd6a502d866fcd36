#include "data/formats/raw_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace tetra::data {

RawFile::RawFile(const std::string& path, std::string kind) : path_(path), kind_(std::move(kind)) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) TETRA_FAIL(Data, "cannot open ", kind_, " ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    TETRA_FAIL(Data, "cannot stat ", kind_, " ", path, ": ", std::strerror(err));
  }
  size_ = static_cast<int64_t>(st.st_size);
}

RawFile::~RawFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RawFile::read_exact(void* dst, int64_t bytes, int64_t at, const char* what) const {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd_, p, static_cast<size_t>(bytes), static_cast<off_t>(at));
    if (got < 0) {
      if (errno == EINTR) continue;
      TETRA_FAIL(Data, "cannot read the ", what, " of ", kind_, " ", path_, " at byte ", at, ": ",
                 std::strerror(errno));
    }
    if (got == 0)
      TETRA_FAIL(Data, kind_, " ", path_, " ended early while reading its ", what, " at byte ", at,
                 " (was the file truncated while open?)");
    p += got;
    at += got;
    bytes -= got;
  }
}

}  // namespace tetra::data
