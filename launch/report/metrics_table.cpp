// metrics.jsonl as columns. The trainer writes flat objects of numbers, booleans and null, so a
// line is scanned in place (keys compared with the previous line's, numbers by std::from_chars);
// nlohmann::json parses only a line the scanner does not understand (escaped keys, say).
#include "launch/report/metrics_table.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "runtime/error.h"

namespace tetra::launch {

const std::vector<double>* MetricsTable::column(std::string_view name) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return &columns[i];
  return nullptr;
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A JSON number. Plain decimals of at most 15 significant digits and 22 fraction digits (what the
// trainer writes) take the exact fast path: an integer mantissa divided by a power of ten, both
// exact in a double, so the one division rounds correctly. Anything else goes to std::from_chars.
const char* parse_number(const char* p, const char* end, double& out, bool& ok) {
  static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const char* q = p;
  const bool negative = q != end && *q == '-';
  if (negative) ++q;
  uint64_t mantissa = 0;
  int digits = 0, fraction = 0;
  const char* first = q;
  while (q != end && *q >= '0' && *q <= '9') {
    mantissa = mantissa * 10 + static_cast<uint64_t>(*q - '0');
    ++q;
    ++digits;
  }
  if (q == first) {
    ok = false;
    return p;
  }
  if (q != end && *q == '.') {
    ++q;
    while (q != end && *q >= '0' && *q <= '9') {
      mantissa = mantissa * 10 + static_cast<uint64_t>(*q - '0');
      ++q;
      ++digits;
      ++fraction;
    }
  }
  const bool exponent = q != end && (*q == 'e' || *q == 'E');
  if (!exponent && digits <= 15 && fraction <= 22) {
    const double v = static_cast<double>(mantissa) / kPow10[fraction];
    out = negative ? -v : v;
    ok = true;
    return q;
  }
  auto [next, ec] = std::from_chars(p, end, out);
  ok = ec != std::errc::invalid_argument;
  if (ec == std::errc::result_out_of_range) out = std::numeric_limits<double>::quiet_NaN();
  return next;
}

// Scans one flat JSON object. Values it keeps: numbers, true/false (1/0), null (NaN).
class FlatScanner {
 public:
  explicit FlatScanner(std::string_view s) : p_(s.data()), end_(s.data() + s.size()) {}

  // Appends (key, value) pairs to `out`; false when the line is not a flat object it understands.
  bool scan(std::vector<std::pair<std::string_view, double>>& out) {
    ws();
    if (!eat('{')) return false;
    ws();
    if (eat('}')) return rest_is_blank();
    for (;;) {
      ws();
      std::string_view key;
      if (!plain_key(key)) return false;
      ws();
      if (!eat(':')) return false;
      ws();
      if (p_ == end_) return false;
      const char c = *p_;
      if (c == '-' || (c >= '0' && c <= '9')) {
        double v = 0;
        bool ok = false;
        p_ = parse_number(p_, end_, v, ok);
        if (!ok) return false;
        out.emplace_back(key, v);
      } else if (word("true")) {
        out.emplace_back(key, 1.0);
      } else if (word("false")) {
        out.emplace_back(key, 0.0);
      } else if (word("null")) {
        out.emplace_back(key, kNaN);
      } else if (c == '"') {
        if (!skip_string()) return false;
      } else if (c == '{' || c == '[') {
        if (!skip_nested()) return false;
      } else {
        return false;
      }
      ws();
      if (eat(',')) continue;
      if (eat('}')) return rest_is_blank();
      return false;
    }
  }

 private:
  void ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r' || *p_ == '\n')) ++p_;
  }
  bool eat(char c) {
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  bool word(const char* w) {
    const size_t n = std::strlen(w);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, w, n) != 0) return false;
    p_ += n;
    return true;
  }
  bool rest_is_blank() {
    ws();
    return p_ == end_;
  }
  // A key without escapes (the fallback parser handles the others).
  bool plain_key(std::string_view& key) {
    if (!eat('"')) return false;
    const char* begin = p_;
    while (p_ != end_ && *p_ != '"') {
      if (*p_ == '\\') return false;
      ++p_;
    }
    if (p_ == end_) return false;
    key = std::string_view(begin, static_cast<size_t>(p_ - begin));
    ++p_;
    return true;
  }
  bool skip_string() {
    ++p_;  // the opening quote
    while (p_ != end_) {
      if (*p_ == '\\') {
        if (++p_ == end_) return false;
      } else if (*p_ == '"') {
        ++p_;
        return true;
      }
      ++p_;
    }
    return false;
  }
  bool skip_nested() {
    int depth = 0;
    while (p_ != end_) {
      const char c = *p_;
      if (c == '"') {
        if (!skip_string()) return false;
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (--depth == 0) {
          ++p_;
          return true;
        }
      }
      ++p_;
    }
    return false;
  }

  const char* p_;
  const char* end_;
};

class TableBuilder {
 public:
  void line(std::string_view text, bool cut) {
    ++lineno_;
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) return;
    pending_.clear();
    if (!FlatScanner(text).scan(pending_) && !fallback(text)) {
      problem(cut ? "cut short (by a crash, or being written now)" : "not a JSON object");
      return;
    }
    commit();
  }

  // Rows expected in all (a hint: columns reserve this much, so they are not copied as they grow).
  void expect_rows(size_t rows) {
    row_hint_ = rows;
    for (auto& c : t_.columns) c.reserve(rows);
  }

  MetricsTable finish() {
    for (const auto& [what, seen] : problems_)
      t_.warnings.push_back(std::to_string(seen.first) + (seen.first == 1 ? " line " : " lines ") + what +
                            " (skipped; " + (seen.first == 1 ? "line " : "first: line ") +
                            std::to_string(seen.second) + ")");
    return std::move(t_);
  }

 private:
  // nlohmann::json for a line the scanner did not take; true when it is a JSON object.
  bool fallback(std::string_view text) {
    nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return false;
    pending_.clear();
    keys_.clear();
    for (auto it = j.begin(); it != j.end(); ++it) {
      const nlohmann::json& v = it.value();
      double x;
      if (v.is_number())
        x = v.get<double>();
      else if (v.is_boolean())
        x = v.get<bool>() ? 1.0 : 0.0;
      else if (v.is_null())
        x = kNaN;
      else
        continue;
      keys_.push_back(it.key());
      pending_.emplace_back(std::string_view(), x);
    }
    for (size_t i = 0; i < pending_.size(); ++i) pending_[i].first = keys_[i];
    return true;
  }

  void commit() {
    const size_t row = t_.rows++;
    for (auto& c : t_.columns) c.push_back(kNaN);
    for (size_t k = 0; k < pending_.size(); ++k) {
      const std::string_view key = pending_[k].first;
      int idx;
      if (k < order_.size() && t_.names[static_cast<size_t>(order_[k])] == key) {
        idx = order_[k];
      } else {
        auto it = index_.find(std::string(key));
        if (it == index_.end()) {
          idx = static_cast<int>(t_.names.size());
          t_.names.emplace_back(key);
          t_.columns.emplace_back();
          t_.columns.back().reserve(std::max(row_hint_, t_.rows));
          t_.columns.back().assign(t_.rows, kNaN);
          index_.emplace(std::string(key), idx);
        } else {
          idx = it->second;
        }
        if (k >= order_.size()) order_.resize(k + 1, -1);
        order_[k] = idx;
      }
      t_.columns[static_cast<size_t>(idx)][row] = pending_[k].second;
    }
  }

  void problem(const std::string& what) {
    auto [it, fresh] = problems_.try_emplace(what, 0, lineno_);
    it->second.first += 1;
  }

  MetricsTable t_;
  size_t lineno_ = 0;
  size_t row_hint_ = 0;
  std::vector<std::pair<std::string_view, double>> pending_;
  std::vector<std::string> keys_;  // owns the fallback's keys
  std::vector<int> order_;         // the column of the k-th key of the previous line
  std::unordered_map<std::string, int> index_;
  std::map<std::string, std::pair<size_t, size_t>> problems_;  // what → (count, first line)
};

// Feeds every line of `text` but a last one without its newline, which is returned.
std::string_view feed_lines(TableBuilder& b, std::string_view text) {
  size_t pos = 0;
  for (;;) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) return text.substr(pos);
    b.line(text.substr(pos, nl - pos), false);
    pos = nl + 1;
  }
}

}  // namespace

MetricsTable parse_metrics_table(std::string_view text) {
  TableBuilder b;
  std::string_view rest = feed_lines(b, text);
  if (!rest.empty()) b.line(rest, true);
  return b.finish();
}

MetricsTable read_metrics_table(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    MetricsTable t;
    t.warnings.push_back(path + " does not exist: no curves (the run wrote no step yet)");
    return t;
  }
  if (!std::filesystem::is_regular_file(path, ec)) {  // a device (/dev/full) would never end
    MetricsTable t;
    t.warnings.push_back(path + " is not a regular file: no curves");
    return t;
  }
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) TETRA_FAIL(Data, "cannot open ", path, " for reading: ", std::strerror(errno));
  TableBuilder b;
  constexpr size_t kBlock = size_t{8} << 20;
  constexpr size_t kMaxLine = size_t{64} << 20;  // a longer "line" is damage, not metrics
  std::vector<char> buf(kBlock);
  size_t have = 0;  // bytes of a line carried over from the previous block
  bool first = true, too_long = false;
  std::uintmax_t file_size = std::filesystem::file_size(path, ec);
  if (ec) file_size = 0;  // no hint
  for (;;) {
    if (have >= kMaxLine) {
      too_long = true;
      have = 0;
      break;
    }
    if (have == buf.size()) buf.resize(buf.size() * 2);  // a line longer than the block
    const size_t got = std::fread(buf.data() + have, 1, buf.size() - have, f.get());
    if (got == 0) {
      if (std::ferror(f.get())) TETRA_FAIL(Data, "cannot read ", path, ": ", std::strerror(errno));
      break;
    }
    if (first) {  // the first block's lines tell how many the file holds
      first = false;
      const size_t lines = static_cast<size_t>(std::count(buf.data(), buf.data() + got, '\n'));
      if (lines > 0) b.expect_rows(static_cast<size_t>(static_cast<double>(file_size) / (double(got) / lines) * 1.02) + 16);
    }
    const std::string_view rest = feed_lines(b, std::string_view(buf.data(), have + got));
    have = rest.size();
    std::memmove(buf.data(), rest.data(), have);
  }
  if (have > 0) b.line(std::string_view(buf.data(), have), true);
  MetricsTable t = b.finish();
  if (too_long)
    t.warnings.push_back("a line longer than " + std::to_string(kMaxLine >> 20) +
                         " MiB after row " + std::to_string(t.rows) + ": the rest of the file was not read");
  for (std::string& w : t.warnings) w = path + ": " + w;
  return t;
}

}  // namespace tetra::launch
