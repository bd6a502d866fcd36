#include "runtime/goodput_clock.h"

#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "runtime/error.h"
#include "runtime/jsonl_file.h"

namespace tetra {

// ---- clocks ---------------------------------------------------------------------------------

double unix_now() {
  auto t = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(t).count();
}

double monotonic_now() {
  auto t = std::chrono::steady_clock::now().time_since_epoch();
  return std::chrono::duration<double>(t).count();
}

namespace {

// Seconds since boot at which this process started: /proc/self/stat field 22 (clock ticks), which
// Linux counts on the boot-time clock. Returns a negative value where that cannot be read.
double process_start_since_boot() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return -1;
  // Field 2 (the command name) is in parentheses and may hold spaces: fields resume after ')'.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(fields >> field)) return -1;
  long ticks_per_s = sysconf(_SC_CLK_TCK);
  if (ticks_per_s <= 0) return -1;
  char* endp = nullptr;
  unsigned long long ticks = std::strtoull(field.c_str(), &endp, 10);
  if (endp == field.c_str()) return -1;
  return static_cast<double>(ticks) / static_cast<double>(ticks_per_s);
}

double compute_process_start() {
  double now = unix_now();
  double since_boot = process_start_since_boot();
  timespec boot{};
  if (since_boot >= 0 && clock_gettime(CLOCK_BOOTTIME, &boot) == 0) {
    double uptime = static_cast<double>(boot.tv_sec) + 1e-9 * static_cast<double>(boot.tv_nsec);
    double start = now - (uptime - since_boot);
    // Trust it only if it is plausible: not in the future, and less than 30 days ago.
    if (start <= now + 0.05 && now - start < 30.0 * 86400.0) return start < now ? start : now;
  }
  return now;
}

}  // namespace

double process_start_unix_time() {
  static const double start = compute_process_start();
  return start;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

GoodputClock::GoodputClock() : unix_anchor_(unix_now()), monotonic_anchor_(monotonic_now()) {}

double GoodputClock::now() const { return to_unix(monotonic_now()); }

double GoodputClock::to_unix(double monotonic) const { return unix_anchor_ + (monotonic - monotonic_anchor_); }

// ---- the ledger -----------------------------------------------------------------------------

int max_attempt_in(const std::string& path, std::vector<JsonlProblem>* skipped) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;
  static const std::string key = "\"attempt\"";
  int best = 0;
  std::string line;
  size_t lineno = 0;
  auto skip = [&](const std::string& what) {
    if (skipped) skipped->push_back({lineno, what});
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (in.eof()) break;  // a last line without '\n' was cut short: its number may be too
    const size_t first = line.find_first_not_of(" \t\r"), last = line.find_last_not_of(" \t\r");
    if (first == std::string::npos) continue;
    if (size_t bad = first_bad_utf8(line); bad != std::string::npos) {
      skip("not valid UTF-8 at byte " + std::to_string(bad + 1) + " (skipped)");
      continue;
    }
    if (line[first] != '{' || line[last] != '}') {
      skip("not a JSON object (skipped)");
      continue;
    }
    for (size_t at = line.find(key); at != std::string::npos; at = line.find(key, at + 1)) {
      size_t p = at + key.size();
      while (p < line.size() && std::isspace(static_cast<unsigned char>(line[p]))) ++p;
      if (p >= line.size() || line[p] != ':') continue;
      ++p;
      while (p < line.size() && std::isspace(static_cast<unsigned char>(line[p]))) ++p;
      char* endp = nullptr;
      errno = 0;
      const long long v = std::strtoll(line.c_str() + p, &endp, 10);
      if (endp == line.c_str() + p) continue;
      // The next attempt is best + 1: a damaged number must not make it wrap or go below 1.
      if (errno == ERANGE || v < 1 || v >= std::numeric_limits<int>::max()) {
        skip("\"attempt\" " + line.substr(p, static_cast<size_t>(endp - (line.c_str() + p))) + " is not a usable attempt number (skipped)");
        break;
      }
      if (v > best) best = static_cast<int>(v);
      break;
    }
  }
  return best;
}

GoodputLedger::GoodputLedger(const std::string& path) : file_(std::make_unique<JsonlAppender>(path)) {
  // Open first: that drops a cut-short last line, whose attempt number may itself be cut.
  std::vector<JsonlProblem> skipped;
  attempt_ = max_attempt_in(path, &skipped) + 1;
  for (const JsonlProblem& p : skipped)
    std::cerr << "tetra: warning: " << path << " line " << p.line << ": " << p.what << std::endl;
}

GoodputLedger::~GoodputLedger() {
  if (!started_ || ended_) return;
  try {
    attempt_end(std::uncaught_exceptions() > 0 ? "error" : "closed", std::nullopt);
  } catch (const std::exception& e) {
    std::cerr << "tetra: warning: could not record the end of attempt " << attempt_ << " in " << path()
              << ": " << e.what() << std::endl;
  }
}

std::string GoodputLedger::path_in(const std::string& run_dir) { return run_dir + "/goodput.jsonl"; }

const std::string& GoodputLedger::path() const { return file_->path(); }

void GoodputLedger::require_started(const char* what) const {
  if (!started_)
    TETRA_FAIL(Internal, "goodput ledger ", path(), ": ", what,
               " recorded before attempt_start; call GoodputLedger::attempt_start first");
  if (ended_)
    TETRA_FAIL(Internal, "goodput ledger ", path(), ": ", what, " recorded after attempt_end of attempt ", attempt_);
}

namespace {
void check_span(const char* kind, double start, double end) {
  TETRA_CHECK(std::isfinite(start) && std::isfinite(end) && end >= start, kind,
              " span must have finite times with end >= start, got start=", start, " end=", end);
}
}  // namespace

void GoodputLedger::append(nlohmann::json event, bool durable) {
  TETRA_CHECK(event.is_object() && event.contains("event") && event["event"].is_string(),
              "a goodput event must be a JSON object with a string \"event\", got ", event.dump());
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string kind = event["event"].get<std::string>();
  if (kind == goodput_event::kAttemptStart) {
    if (started_) TETRA_FAIL(Internal, "goodput ledger ", path(), ": attempt ", attempt_, " started twice");
  } else {
    require_started(kind.c_str());
  }
  event["attempt"] = attempt_;
  file_->append(event, durable);
  if (kind == goodput_event::kAttemptStart) started_ = true;
  if (kind == goodput_event::kAttemptEnd) ended_ = true;
}

void GoodputLedger::attempt_start(double process_start, int world_size, const std::string& host) {
  TETRA_CHECK(std::isfinite(process_start) && world_size > 0, "attempt_start needs a process start time and a ",
              "positive world size, got ", process_start, " and ", world_size);
  append({{"event", goodput_event::kAttemptStart},
          {"time", process_start},
          {"world_size", world_size},
          {"host", host},
          {"pid", static_cast<int64_t>(getpid())}},
         /*durable=*/true);
}

void GoodputLedger::run_info(const RunInfo& info, double time) {
  TETRA_CHECK(info.flops_per_token >= 0 && info.peak_flops_per_device >= 0 && info.devices >= 0 &&
                  info.tokens_per_step >= 0,
              "run_info fields must not be negative");
  nlohmann::json e = {{"event", goodput_event::kRunInfo},
                      {"time", time},
                      {"flops_per_token", info.flops_per_token},
                      {"peak_flops_per_device", info.peak_flops_per_device},
                      {"devices", info.devices},
                      {"tokens_per_step", info.tokens_per_step},
                      {"precision", info.precision},
                      {"device_kind", info.device_kind}};
  if (!info.data_io.empty()) e["data_io"] = info.data_io;
  if (!info.data_io_reason.empty()) e["data_io_reason"] = info.data_io_reason;
  append(std::move(e));
}

void GoodputLedger::step(const StepTiming& s) {
  check_span("step", s.start, s.end);
  const StepBreakdown& b = s.breakdown;
  nlohmann::json e = {{"event", goodput_event::kStep},
                      {"step", s.step},
                      {"start", s.start},
                      {"end", s.end},
                      {"tokens", s.tokens},
                      {"exposed_comm", b.exposed_comm},
                      {"bubble", b.bubble},
                      {"recompute", b.recompute},
                      {"optimizer", b.optimizer},
                      {"data_wait", b.data_wait},
                      {"host_overhead", b.host_overhead}};
  if (s.loss) e["loss"] = *s.loss;
  if (s.skipped) e["skipped"] = true;
  if (!b.exposed_comm_by_axis.empty()) e["exposed_comm_by_axis"] = b.exposed_comm_by_axis;
  append(std::move(e));
}

void GoodputLedger::eval(double start, double end, int64_t step) {
  check_span("eval", start, end);
  append({{"event", goodput_event::kEval}, {"start", start}, {"end", end}, {"step", step}});
}

void GoodputLedger::ckpt_save(double start, double end, int64_t step, std::optional<double> write_seconds) {
  check_span("ckpt_save", start, end);
  nlohmann::json e = {{"event", goodput_event::kCkptSave},
                      {"start", start},
                      {"end", end},
                      {"step", step},
                      {"async", write_seconds.has_value()}};
  if (write_seconds) e["write_seconds"] = *write_seconds;
  append(std::move(e), /*durable=*/true);
}

void GoodputLedger::ckpt_load(double start, double end, int64_t step) {
  check_span("ckpt_load", start, end);
  append({{"event", goodput_event::kCkptLoad}, {"start", start}, {"end", end}, {"step", step}}, /*durable=*/true);
}

void GoodputLedger::other(const std::string& name, double start, double end) {
  check_span("other", start, end);
  TETRA_CHECK(!name.empty(), "an \"other\" goodput span needs a name");
  append({{"event", goodput_event::kOther}, {"name", name}, {"start", start}, {"end", end}});
}

void GoodputLedger::attempt_end(const std::string& reason, std::optional<int> exit_code, double time) {
  TETRA_CHECK(!reason.empty(), "attempt_end needs a reason (finished, signal, error, ...)");
  nlohmann::json e = {{"event", goodput_event::kAttemptEnd}, {"time", time}, {"reason", reason}};
  e["exit_code"] = exit_code ? nlohmann::json(*exit_code) : nlohmann::json(nullptr);
  append(std::move(e), /*durable=*/true);
}

// ---- spans ----------------------------------------------------------------------------------

GoodputSpan::GoodputSpan(GoodputLedger& ledger, Kind kind, int64_t step, std::string name)
    : ledger_(ledger), kind_(kind), step_(step), name_(std::move(name)), start_(ledger.now()),
      uncaught_at_start_(std::uncaught_exceptions()) {
  TETRA_CHECK(kind != Kind::Other || !name_.empty(), "an \"other\" goodput span needs a name");
}

GoodputSpan::~GoodputSpan() {
  if (done_) return;
  try {
    record(std::uncaught_exceptions() > uncaught_at_start_);
  } catch (const std::exception& e) {
    std::cerr << "tetra: warning: could not record a goodput span in " << ledger_.path() << ": " << e.what()
              << std::endl;
  }
}

void GoodputSpan::end() {
  if (!done_) record(false);
}

void GoodputSpan::record(bool failed) {
  done_ = true;
  double end = ledger_.now();
  nlohmann::json e;
  switch (kind_) {
    case Kind::Eval:
      e = {{"event", goodput_event::kEval}, {"step", step_}};
      break;
    case Kind::CkptSave:
      e = {{"event", goodput_event::kCkptSave}, {"step", step_}, {"async", false}};
      break;
    case Kind::CkptLoad:
      e = {{"event", goodput_event::kCkptLoad}, {"step", step_}};
      break;
    case Kind::Other:
      e = {{"event", goodput_event::kOther}, {"name", name_}};
      break;
  }
  e["start"] = start_;
  e["end"] = end;
  if (failed) e["failed"] = true;
  ledger_.append(std::move(e), kind_ == Kind::CkptSave || kind_ == Kind::CkptLoad);
}

}  // namespace tetra
