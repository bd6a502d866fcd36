// Synthetic goodput ledgers for the report tests: events as the trainer would write them, built
// on a time cursor so that each test states its timeline in seconds from the job's start.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

namespace tetra::test {

// A Unix time of 2024 as origin: the report must keep sub-millisecond sums at this magnitude.
inline constexpr double kT0 = 1.7e9;

struct StepParts {
  double exposed_comm = 0, bubble = 0, recompute = 0, optimizer = 0, data_wait = 0, host_overhead = 0;
};

class LedgerBuilder {
 public:
  // Starts attempt `attempt` at `t` seconds after kT0; the cursor moves there.
  LedgerBuilder& start(int attempt, double t, int world_size = 8, const std::string& host = "node01") {
    attempt_ = attempt;
    cursor_ = t;
    events_.push_back({{"event", "attempt_start"}, {"attempt", attempt}, {"time", kT0 + t},
                       {"world_size", world_size}, {"host", host}, {"pid", 4242}});
    return *this;
  }
  LedgerBuilder& run_info(double flops_per_token, double peak, int devices, int64_t tokens_per_step) {
    events_.push_back({{"event", "run_info"}, {"attempt", attempt_}, {"time", kT0 + cursor_},
                       {"flops_per_token", flops_per_token}, {"peak_flops_per_device", peak},
                       {"devices", devices}, {"tokens_per_step", tokens_per_step},
                       {"precision", "bf16"}, {"device_kind", "test-gpu"}});
    return *this;
  }
  LedgerBuilder& wait(double seconds) {
    cursor_ += seconds;
    return *this;
  }
  LedgerBuilder& step(int64_t n, double seconds, int64_t tokens = 1000, StepParts p = {}) {
    events_.push_back({{"event", "step"}, {"attempt", attempt_}, {"step", n}, {"start", kT0 + cursor_},
                       {"end", kT0 + cursor_ + seconds}, {"tokens", tokens},
                       {"exposed_comm", p.exposed_comm}, {"bubble", p.bubble}, {"recompute", p.recompute},
                       {"optimizer", p.optimizer}, {"data_wait", p.data_wait}, {"host_overhead", p.host_overhead},
                       {"loss", 3.0}});
    cursor_ += seconds;
    return *this;
  }
  LedgerBuilder& steps(int64_t first, int64_t last, double seconds, int64_t tokens = 1000, StepParts p = {}) {
    for (int64_t n = first; n <= last; ++n) step(n, seconds, tokens, p);
    return *this;
  }
  LedgerBuilder& span(const std::string& kind, double seconds, int64_t step = -1, const std::string& name = "") {
    nlohmann::json e = {{"event", kind}, {"attempt", attempt_}, {"start", kT0 + cursor_},
                        {"end", kT0 + cursor_ + seconds}};
    if (step >= 0) e["step"] = step;
    if (!name.empty()) e["name"] = name;
    if (kind == "ckpt_save") e["async"] = false;
    events_.push_back(e);
    cursor_ += seconds;
    return *this;
  }
  LedgerBuilder& end(const std::string& reason = "finished", int exit_code = 0) {
    events_.push_back({{"event", "attempt_end"}, {"attempt", attempt_}, {"time", kT0 + cursor_},
                       {"reason", reason}, {"exit_code", exit_code}});
    return *this;
  }
  LedgerBuilder& raw(nlohmann::json e) {
    events_.push_back(std::move(e));
    return *this;
  }
  double cursor() const { return cursor_; }
  const std::vector<nlohmann::json>& events() const { return events_; }

  // Writes the events as RUN_DIR/goodput.jsonl.
  void write(const std::string& run_dir) const {
    std::filesystem::create_directories(run_dir);
    std::ofstream out(run_dir + "/goodput.jsonl");
    for (const auto& e : events_) out << e.dump() << "\n";
  }

 private:
  int attempt_ = 1;
  double cursor_ = 0;
  std::vector<nlohmann::json> events_;
};

// Folders made by fresh_dir, removed when the test program exits.
struct TempDirs {
  std::vector<std::filesystem::path> dirs;
  ~TempDirs() {
    std::error_code ec;
    for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};

// A fresh, empty folder for one test under the system's temporary folder.
inline std::string fresh_dir(const std::string& name) {
  static TempDirs made;
  auto dir = std::filesystem::temp_directory_path() / ("tetra_goodput_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  made.dirs.push_back(dir);
  return dir.string();
}

}  // namespace tetra::test
