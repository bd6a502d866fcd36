// Append-only JSON Lines files (one JSON object per line), the format of RUN_DIR/goodput.jsonl and
// RUN_DIR/metrics.jsonl. Writers append whole lines with one write(2) each, so a crash loses at
// most the line being written; readers skip a line that a crash cut short, with a warning.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tetra {

class JsonlAppender {
 public:
  // Opens (creating it and missing parent folders) `path` for appending. If the file ends in a
  // line cut short by an earlier crash, that partial line is dropped first (with a warning on
  // stderr), so the next line starts clean.
  explicit JsonlAppender(const std::string& path);
  ~JsonlAppender();
  JsonlAppender(const JsonlAppender&) = delete;
  JsonlAppender& operator=(const JsonlAppender&) = delete;

  // Writes `object` as one line. It reaches the kernel before this returns (no user-space buffer);
  // with `durable` it also reaches the disk (fdatasync), surviving a crash of the node.
  void append(const nlohmann::json& object, bool durable = false);
  const std::string& path() const { return path_; }
  // Bytes of a cut-short last line that the constructor dropped (0 if the file was clean).
  size_t repaired_bytes() const { return repaired_bytes_; }

 private:
  std::string path_;
  int fd_ = -1;
  size_t repaired_bytes_ = 0;
};

// One line of a JSONL file that could not be used, for the reader's warnings.
struct JsonlProblem {
  size_t line = 0;  // 1-based
  std::string what;
};

// Offset of the first byte of `s` that is not part of well-formed UTF-8, or npos. Overlong forms,
// surrogates and code points past U+10FFFF are ill-formed (RFC 3629).
size_t first_bad_utf8(const std::string& s);

// Reads every line of `path` that holds a JSON object. Lines that do not parse (a last line cut by
// a crash, or damage: bytes that are not UTF-8, text that is not JSON) and lines that are not
// objects are skipped and described in `problems`.
// Blank lines are ignored. Fails (ErrorKind::Data) if the file cannot be opened.
std::vector<nlohmann::json> read_jsonl(const std::string& path, std::vector<JsonlProblem>* problems);

}  // namespace tetra
