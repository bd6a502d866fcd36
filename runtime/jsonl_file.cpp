#include "runtime/jsonl_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "runtime/error.h"

namespace tetra {

namespace {

std::string errno_text() { return std::strerror(errno); }

// Offset just past the last '\n' in the first `size` bytes of `fd` (0 if there is none).
off_t end_of_last_full_line(int fd, off_t size, const std::string& path) {
  char buf[4096];
  off_t pos = size;
  while (pos > 0) {
    off_t chunk = pos < static_cast<off_t>(sizeof buf) ? pos : static_cast<off_t>(sizeof buf);
    ssize_t n = pread(fd, buf, static_cast<size_t>(chunk), pos - chunk);
    if (n != chunk)
      TETRA_FAIL(Data, "cannot read ", path, " while checking its last line: ",
                 n < 0 ? errno_text() : "short read", "; check the file system");
    for (off_t i = chunk - 1; i >= 0; --i)
      if (buf[i] == '\n') return pos - chunk + i + 1;
    pos -= chunk;
  }
  return 0;
}

}  // namespace

size_t first_bad_utf8(const std::string& s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = b[i];
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      const unsigned x = b[i + k];
      if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return i;
    }
    i += len;
  }
  return std::string::npos;
}

JsonlAppender::JsonlAppender(const std::string& path) : path_(path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec)
      TETRA_FAIL(Data, "cannot create the folder ", parent.string(), " for ", path, ": ", ec.message(),
                 "; check run.output_dir and its permissions");
  }
  fd_ = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    TETRA_FAIL(Data, "cannot open ", path, " for appending: ", errno_text(),
               "; check run.output_dir and its permissions");

  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    int saved = errno;
    ::close(fd_);
    TETRA_FAIL(Data, "cannot stat ", path, ": ", std::strerror(saved));
  }
  if (st.st_size > 0) {
    char last = 0;
    if (pread(fd_, &last, 1, st.st_size - 1) != 1) {
      int saved = errno;
      ::close(fd_);
      TETRA_FAIL(Data, "cannot read the end of ", path, ": ", std::strerror(saved));
    }
    if (last != '\n') {
      off_t keep = end_of_last_full_line(fd_, st.st_size, path);
      if (ftruncate(fd_, keep) != 0) {
        int saved = errno;
        ::close(fd_);
        TETRA_FAIL(Data, "cannot drop the cut-short last line of ", path, ": ", std::strerror(saved),
                   "; remove that line by hand and start again");
      }
      repaired_bytes_ = static_cast<size_t>(st.st_size - keep);
      std::cerr << "tetra: warning: " << path << ": dropped a last line of " << repaired_bytes_
                << " bytes cut short by an earlier crash" << std::endl;
    }
  }
}

JsonlAppender::~JsonlAppender() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonlAppender::append(const nlohmann::json& object, bool durable) {
  TETRA_CHECK(object.is_object(), "a JSONL line must be a JSON object, got ", object.type_name());
  // Non-finite numbers are written as null; invalid UTF-8 is replaced rather than thrown.
  std::string line = object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line.push_back('\n');
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      TETRA_FAIL(Data, "cannot append to ", path_, ": ", errno_text(), "; check free space on its file system");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (durable && fdatasync(fd_) != 0 && errno != EINVAL)
    TETRA_FAIL(Data, "cannot sync ", path_, " to disk: ", errno_text(), "; check its file system");
}

std::vector<nlohmann::json> read_jsonl(const std::string& path, std::vector<JsonlProblem>* problems) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TETRA_FAIL(Data, "cannot open ", path, " for reading: ", errno_text());
  std::vector<nlohmann::json> out;
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    bool cut = in.eof();  // the last line had no '\n': its writer died mid-line
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // Checked before parsing: the parser's message would quote the bad bytes, and a warning that
    // is not UTF-8 cannot be written into goodput.json.
    if (size_t bad = first_bad_utf8(line); bad != std::string::npos) {
      if (problems)
        problems->push_back({lineno, cut ? "cut short, likely by a crash while it was written (skipped)"
                                         : "not valid UTF-8 at byte " + std::to_string(bad + 1) + " (skipped)"});
      continue;
    }
    try {
      nlohmann::json j = nlohmann::json::parse(line);
      if (!j.is_object()) {
        if (problems) problems->push_back({lineno, "not a JSON object (skipped)"});
        continue;
      }
      out.push_back(std::move(j));
    } catch (const nlohmann::json::parse_error& e) {
      if (problems)
        problems->push_back({lineno, cut ? "cut short, likely by a crash while it was written (skipped)"
                                         : std::string("not valid JSON (skipped): ") + e.what()});
    }
  }
  return out;
}

}  // namespace tetra
