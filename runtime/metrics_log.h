// The training metrics log, RUN_DIR/metrics.jsonl (ARCHITECTURE.md §5): one JSON object per step,
// appended by rank 0 and readable while the run goes on (tail -f, jq, pandas.read_json(lines=True)).
// A resumed run appends to the same file, so a step redone after a restart appears again; readers
// keep its last line (each line carries the attempt that wrote it).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace tetra {

class JsonlAppender;

// One line of metrics.jsonl. Non-finite numbers (a diverged loss) are written as null.
struct MetricsRecord {
  int64_t step = 0;           // 1-based optimizer step
  double loss = 0;            // training loss of the step (mean over the global batch)
  double lr = 0;              // learning rate used by the step
  double grad_norm = 0;       // global gradient norm before clipping
  int64_t tokens = 0;         // tokens trained so far, this step included (cumulative)
  double step_ms = 0;         // wall time of the step
  double tokens_per_s = 0;    // tokens of this step / its wall time
  nlohmann::json extra = nlohmann::json::object();  // more fields (val_loss, mfu, ...), merged in
};

class MetricsLog {
 public:
  // Appends to `path`, creating it; `attempt` (GoodputLedger::attempt(), 0 to omit) tags lines.
  explicit MetricsLog(const std::string& path, int attempt = 0);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  static std::string path_in(const std::string& run_dir);  // RUN_DIR/metrics.jsonl

  // Writes one line: the standard fields, "time" (Unix seconds), "attempt", then `extra`'s fields.
  // An extra field that reuses a standard name is an error (it would silently replace it).
  void log(const MetricsRecord& record);
  const std::string& path() const;

 private:
  std::unique_ptr<JsonlAppender> file_;
  int attempt_;
};

}  // namespace tetra
