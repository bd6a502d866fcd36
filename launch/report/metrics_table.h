// RUN_DIR/metrics.jsonl (runtime/metrics_log.h) read back as columns, for the HTML page: one row
// per line in file order (a step redone after a restart has a row per execution), one column of
// doubles per top-level key that holds a number or a boolean (true = 1, false = 0) on some line;
// NaN where a line lacks the key or holds null (a diverged loss). String, array and object values
// are skipped. Reads a million-line file in well under a second: a flat-object scanner with
// std::from_chars, and nlohmann::json only for the rare line it does not understand.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tetra::launch {

struct MetricsTable {
  size_t rows = 0;
  std::vector<std::string> names;            // column names, in the order they first appear
  std::vector<std::vector<double>> columns;  // columns[c][row]
  std::vector<std::string> warnings;         // lines skipped and why (one entry per kind, counted)

  // The column of a key, or nullptr when no line has it.
  const std::vector<double>* column(std::string_view name) const;
};

// Parses JSON Lines text. A line that is not a JSON object is skipped with a warning; a last line
// without its newline is taken as cut short by a crash (skipped, with its own warning).
MetricsTable parse_metrics_table(std::string_view text);
// Reads a file in blocks (the whole file is never held at once). A missing file gives an empty
// table with a warning; a file that exists but cannot be read fails (ErrorKind::Data).
MetricsTable read_metrics_table(const std::string& path);

}  // namespace tetra::launch
