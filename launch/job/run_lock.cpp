#include "launch/job/run_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "runtime/error.h"

namespace tetra::launch {

namespace fs = std::filesystem;

namespace {

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// This kernel's boot and this process's pid namespace: a pid means the same process only where
// both agree.
std::string boot_id() { return first_line("/proc/sys/kernel/random/boot_id"); }
std::string pid_namespace() {
  char buf[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string utc_text(double unix_s) {
  const std::time_t t = static_cast<std::time_t>(std::floor(unix_s));
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::gmtime(&t));
  char ms[16];
  std::snprintf(ms, sizeof ms, ".%03d UTC", static_cast<int>((unix_s - std::floor(unix_s)) * 1000));
  return std::string(buf) + ms;
}

double mtime_of(const struct stat& st) { return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9; }

// What a lock file says about its holder (key=value lines).
struct Holder {
  std::map<std::string, std::string> kv;
  bool parsed = false;
  struct stat st {};
  std::string get(const std::string& k) const {
    auto it = kv.find(k);
    return it == kv.end() ? std::string("?") : it->second;
  }
  std::string describe() const {
    return "host " + get("host") + ", pid " + get("pid") + ", started " + get("start");
  }
};

// Opens and reads the lock (an open revalidates a network file system's cached attributes);
// false when there is none.
bool read_holder(const std::string& path, Holder* h) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    TETRA_FAIL(Data, "cannot read the run lock ", path, ": ", std::strerror(errno));
  }
  fstat(fd, &h->st);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  h->kv.clear();
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) h->kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  h->parsed = h->kv.count("pid") && h->kv.count("boot_id");
  return true;
}

// The file server's clock now: touch our own file there and read its time back.
double server_now(const std::string& probe) {
  utimensat(AT_FDCWD, probe.c_str(), nullptr, 0);
  struct stat st {};
  if (stat(probe.c_str(), &st) != 0) TETRA_FAIL(Data, "cannot stat ", probe, ": ", std::strerror(errno));
  return mtime_of(st);
}

enum class Verdict { Alive, Gone, Released };

struct Judgement {
  Verdict verdict;
  std::string why;
};

// Same machine: the pid is alive and started when the lock says.
Judgement judge_local(const Holder& h) {
  long pid = 0;
  unsigned long long ticks = 0;
  try {
    pid = std::stol(h.get("pid"));
    ticks = std::stoull(h.get("start_ticks"));
  } catch (const std::exception&) {
    return {Verdict::Gone, "its pid or start time is unreadable"};
  }
  const std::optional<unsigned long long> now_ticks = process_start_ticks(static_cast<int>(pid));
  if (!now_ticks) return {Verdict::Gone, "process " + std::to_string(pid) + " no longer exists"};
  if (*now_ticks != ticks) return {Verdict::Gone, "pid " + std::to_string(pid) + " now belongs to another process"};
  return {Verdict::Alive, ""};
}

// Another machine: watch the heartbeat until it moves (alive) or the lease runs out (gone).
Judgement judge_remote(const std::string& path, const std::string& probe, Holder h) {
  const double touched = mtime_of(h.st);
  bool announced = false;
  for (;;) {
    const double age = server_now(probe) - touched;
    if (age > RunLock::kLeaseS)
      return {Verdict::Gone, "its heartbeat stopped " + std::to_string(static_cast<long>(age)) + " s ago"};
    if (!announced) {
      std::printf("tetra: %s is held by a job on another host (%s), last heartbeat %.0f s ago: waiting up to %.0f s "
                  "for it to renew (the job is alive) or expire (it is gone)\n",
                  path.c_str(), h.describe().c_str(), age, RunLock::kLeaseS - age);
      std::fflush(stdout);
      announced = true;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
    Holder again;
    if (!read_holder(path, &again) || again.st.st_ino != h.st.st_ino)
      return {Verdict::Released, ""};  // acquire() looks again
    if (mtime_of(again.st) != touched) return {Verdict::Alive, ""};
  }
}

std::string lock_text(const LaunchEnvironment& env) {
  std::ostringstream os;
  os << "host=" << env.host << "\npid=" << getpid() << "\nstart=" << utc_text(env.process_start_unix)
     << "\nstart_unix=" << std::to_string(env.process_start_unix)
     << "\nstart_ticks=" << process_start_ticks(getpid()).value_or(0) << "\nboot_id=" << boot_id()
     << "\npid_ns=" << pid_namespace() << "\n";
  return os.str();
}

void write_durably(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) TETRA_FAIL(Data, "cannot create ", path, ": ", std::strerror(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    TETRA_FAIL(Data, "cannot write ", path, ": ", std::strerror(err));
  }
}

// Atomically creates `lock` with `mine`'s content: a hard link (atomic on network file systems
// too), or O_EXCL where the file system has no hard links. False when a lock exists.
bool try_create(const std::string& mine, const std::string& lock, const std::string& text) {
  if (::link(mine.c_str(), lock.c_str()) == 0) return true;
  if (errno == EEXIST) return false;
  if (errno != EPERM && errno != EOPNOTSUPP && errno != ENOSYS && errno != EXDEV)
    TETRA_FAIL(Data, "cannot create the run lock ", lock, ": ", std::strerror(errno));
  const int fd = ::open(lock.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return false;
    TETRA_FAIL(Data, "cannot create the run lock ", lock, ": ", std::strerror(errno));
  }
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  ::close(fd);
  if (!ok) TETRA_FAIL(Data, "cannot write the run lock ", lock, ": ", std::strerror(errno));
  return true;
}

// Moves a stale lock out of the way, unless another job replaced it in the meantime.
void take_over(const std::string& lock, const Holder& stale, const std::string& why) {
  const std::string aside = lock + ".stale." + std::to_string(getpid());
  if (::rename(lock.c_str(), aside.c_str()) != 0) return;  // gone already: look again
  struct stat st {};
  if (stat(aside.c_str(), &st) == 0 && st.st_ino != stale.st.st_ino) {
    // Another job took it over first and this moved its fresh lock: put it back (a link never
    // replaces a lock made since) and look again.
    if (::link(aside.c_str(), lock.c_str()) != 0 && errno != EEXIST)
      std::fprintf(stderr, "tetra: warning: cannot restore %s: %s\n", lock.c_str(), std::strerror(errno));
    ::unlink(aside.c_str());
    return;
  }
  ::unlink(aside.c_str());
  std::printf("tetra: took over %s from a job that is gone (%s: %s)\n", lock.c_str(), stale.describe().c_str(),
              why.c_str());
  std::fflush(stdout);
}

}  // namespace

std::unique_ptr<RunLock> RunLock::acquire(const std::string& run_dir, const LaunchEnvironment& env) {
  const std::string lock = (fs::path(run_dir) / kFileName).string();
  const std::string mine = lock + "." + env.host + "." + std::to_string(getpid());
  const std::string text = lock_text(env);
  write_durably(mine, text);
  struct Unlink {  // the staging file goes on every path out
    const std::string& p;
    ~Unlink() { ::unlink(p.c_str()); }
  } unlink_mine{mine};
  const std::string here_boot = boot_id(), here_ns = pid_namespace();
  for (int tries = 0; tries < 100; ++tries) {
    if (try_create(mine, lock, text)) {
      struct stat st {};
      stat(lock.c_str(), &st);
      return std::unique_ptr<RunLock>(new RunLock(lock, static_cast<unsigned long long>(st.st_ino)));
    }
    Holder h;
    if (!read_holder(lock, &h)) continue;  // released meanwhile
    const bool local = h.parsed && h.get("boot_id") == here_boot && h.get("pid_ns") == here_ns && !here_boot.empty();
    const Judgement j = local ? judge_local(h) : judge_remote(lock, mine, h);
    if (j.verdict == Verdict::Alive)
      TETRA_FAIL(Usage, "the run directory ", run_dir, " is in use by a running job (", h.describe(),
                 "; lock ", lock, "). Wait for it to end, stop it (SIGTERM to pid ", h.get("pid"), " on ", h.get("host"),
                 " saves a checkpoint, after which checkpoint.resume: auto continues it), or give this run another "
                 "run.name or run.output_dir");
    if (j.verdict == Verdict::Gone) take_over(lock, h, j.why);
  }
  TETRA_FAIL(Data, "cannot take the run lock ", lock, ": other jobs keep replacing it");
}

RunLock::RunLock(std::string path, unsigned long long inode) : path_(std::move(path)), inode_(inode) {
  thread_ = std::thread([this] { heartbeat(); });
}

void RunLock::heartbeat() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!cv_.wait_for(lk, std::chrono::duration<double>(kHeartbeatS), [this] { return stop_; })) {
    struct stat st {};
    if (stat(path_.c_str(), &st) != 0 || static_cast<unsigned long long>(st.st_ino) != inode_) {
      std::fprintf(stderr, "tetra: warning: %s is no longer this job's (removed, or taken over after this process "
                           "stopped renewing it for %.0f s)\n", path_.c_str(), kLeaseS);
      return;
    }
    utimensat(AT_FDCWD, path_.c_str(), nullptr, 0);
  }
}

RunLock::~RunLock() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  struct stat st {};
  if (stat(path_.c_str(), &st) == 0 && static_cast<unsigned long long>(st.st_ino) == inode_) ::unlink(path_.c_str());
}

}  // namespace tetra::launch
