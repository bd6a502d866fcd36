#include "launch/checkpoint/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/error.h"

namespace tetra::launch {

namespace fs = std::filesystem;

std::string checkpoints_dir(const std::string& run_dir) { return (fs::path(run_dir) / kCheckpointsDir).string(); }

std::string step_dir_name(int64_t step) { return "step_" + std::to_string(step); }

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.h5", rank);
  return buf;
}

namespace {
std::optional<int64_t> parse_digits(const std::string& s) {
  if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(s);
}
}  // namespace

std::optional<int64_t> parse_step_dir(const std::string& name) {
  if (name.rfind("step_", 0) != 0) return std::nullopt;
  return parse_digits(name.substr(5));
}

std::optional<int64_t> parse_tmp_step_dir(const std::string& name) {
  const std::string suffix = ".tmp";
  if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  return parse_step_dir(name.substr(0, name.size() - suffix.size()));
}

std::vector<CheckpointDir> list_checkpoint_dirs(const std::string& dir) {
  std::vector<CheckpointDir> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  fs::directory_iterator it(dir, ec);
  if (ec) TETRA_FAIL(Checkpoint, dir, ": cannot list checkpoints: ", ec.message());
  for (const fs::directory_entry& e : it) {
    std::error_code entry_ec;
    if (!e.is_directory(entry_ec)) continue;
    auto step = parse_step_dir(e.path().filename().string());
    if (!step) continue;
    out.push_back({*step, e.path().string(), fs::is_regular_file(e.path() / kMetaFile, entry_ec)});
  }
  std::sort(out.begin(), out.end(), [](const CheckpointDir& a, const CheckpointDir& b) { return a.step > b.step; });
  return out;
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) TETRA_FAIL(Checkpoint, path, ": cannot open to fsync: ", std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories (EINVAL); their renames are durable anyway.
  if (rc != 0 && !(err == EINVAL && fs::is_directory(path)))
    TETRA_FAIL(Checkpoint, path, ": fsync failed: ", std::strerror(err), " (disk full or I/O error?)");
}

void write_file_durably(const std::string& path, const std::string& content) {
  const std::string part = path + ".part";
  {
    std::ofstream out(part, std::ios::binary | std::ios::trunc);
    if (!out) TETRA_FAIL(Checkpoint, part, ": cannot create (directory missing or not writable?)");
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) TETRA_FAIL(Checkpoint, part, ": write failed (disk full?)");
  }
  fsync_path(part);
  std::error_code ec;
  fs::rename(part, path, ec);
  if (ec) TETRA_FAIL(Checkpoint, "cannot rename ", part, " to ", path, ": ", ec.message());
  fsync_path(fs::path(path).parent_path().string());
}

std::string read_text_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) TETRA_FAIL(Checkpoint, path, ": cannot open: ", std::strerror(err));
    throw CheckpointUnreadable(path + ": cannot open: " + std::strerror(err));
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;  // EISDIR for a directory in the file's place, EIO, ...
      ::close(fd);
      throw CheckpointUnreadable(path + ": cannot read: " + std::strerror(err));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

int remove_incomplete_saves(const std::string& dir) {
  std::error_code ec;
  int removed = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!parse_tmp_step_dir(e.path().filename().string())) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (rm) {
      std::fprintf(stderr, "tetra: warning: cannot remove %s (left by a save that did not complete): %s\n",
                   e.path().c_str(), rm.message().c_str());
      continue;
    }
    std::printf("tetra: removed %s (left by a save that did not complete)\n", e.path().c_str());
    ++removed;
  }
  return removed;
}

}  // namespace tetra::launch
