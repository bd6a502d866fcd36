#include "runtime/metrics_log.h"

#include "runtime/error.h"
#include "runtime/goodput_clock.h"
#include "runtime/jsonl_file.h"

namespace tetra {

MetricsLog::MetricsLog(const std::string& path, int attempt)
    : file_(std::make_unique<JsonlAppender>(path)), attempt_(attempt) {
  TETRA_CHECK(attempt >= 0, "MetricsLog attempt must be >= 0 (0: untagged), got ", attempt);
}

MetricsLog::~MetricsLog() = default;

std::string MetricsLog::path_in(const std::string& run_dir) { return run_dir + "/metrics.jsonl"; }

const std::string& MetricsLog::path() const { return file_->path(); }

void MetricsLog::log(const MetricsRecord& r) {
  TETRA_CHECK(r.extra.is_object() || r.extra.is_null(), "MetricsRecord::extra must be a JSON object, got ",
              r.extra.type_name());
  nlohmann::json line = {{"step", r.step},
                         {"loss", r.loss},
                         {"lr", r.lr},
                         {"grad_norm", r.grad_norm},
                         {"tokens", r.tokens},
                         {"step_ms", r.step_ms},
                         {"tokens_per_s", r.tokens_per_s},
                         {"time", unix_now()}};
  if (attempt_ > 0) line["attempt"] = attempt_;
  if (r.extra.is_object()) {
    for (auto it = r.extra.begin(); it != r.extra.end(); ++it) {
      if (line.contains(it.key()))
        TETRA_FAIL(Internal, "metrics field \"", it.key(), "\" in MetricsRecord::extra of step ", r.step,
                   " reuses a standard field name; set the standard field instead or rename the extra one");
      line[it.key()] = it.value();
    }
  }
  file_->append(line);
}

}  // namespace tetra
