// Reading a config: YAML text plus --set overrides → Config, every key checked against the schema
// (launch/config/schema.h). Errors point at FILE:LINE of the key, or at the --set that gave it.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "launch/config/config.h"
#include "launch/config/data.h"
#include "launch/config/init_from.h"
#include "launch/config/schema.h"
#include "runtime/error.h"
#include "runtime/text_join.h"

namespace tetra::launch {

namespace {

using schema::Field;
using schema::Type;

// One value for one key, from the file or from --set.
struct Entry {
  const Field* field;
  YAML::Node value;
  std::string where;  // "FILE:LINE" or "--set section.key"
  int line = 0;       // 0 for overrides
};

[[noreturn]] void fail(const std::string& where, const std::string& key, const std::string& what,
                       const std::string& valid = "") {
  // An override's origin already names its key: "--set train.steps: abc is not an integer".
  bool named = key.empty() || where == "--set " + key;
  TETRA_FAIL(Config, where, ": ", named ? "" : key + ": ", what, valid.empty() ? "" : " (" + valid + ")");
}

int line_of(const YAML::Node& n) {
  YAML::Mark m = n.Mark();
  return m.is_null() || m.line < 0 ? 0 : m.line + 1;
}

std::string at(const std::string& file, int line) {
  return line > 0 ? file + ":" + std::to_string(line) : file;
}

bool is_quoted(const YAML::Node& n) { return n.Tag() == "!"; }

// How a value looks in a message: the scalar as written, or what kind of node it is.
std::string shown(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "an empty value";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: return is_quoted(n) ? "\"" + n.Scalar() + "\"" : n.Scalar();
    default: return "an undefined value";
  }
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

bool parse_int64(std::string text, std::int64_t& out, bool& overflow) {
  overflow = false;
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  if (text.empty()) return false;
  auto res = std::from_chars(text.data(), text.data() + text.size(), out, 10);
  if (res.ec == std::errc::result_out_of_range) overflow = true;
  return res.ec == std::errc() && res.ptr == text.data() + text.size();
}

bool parse_double(std::string text, double& out) {
  std::string low = lower(text);
  // YAML spells infinities and NaN with a dot; they parse so the range check can name them.
  if (low == ".inf" || low == "+.inf" || low == "-.inf" || low == ".nan") {
    out = low == ".nan" ? std::numeric_limits<double>::quiet_NaN()
                        : (low[0] == '-' ? -1 : 1) * std::numeric_limits<double>::infinity();
    return true;
  }
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  if (text.empty() || std::isalpha(static_cast<unsigned char>(text[0]))) return false;  // no "inf", "nan"
  auto res = std::from_chars(text.data(), text.data() + text.size(), out, std::chars_format::general);
  return res.ec == std::errc() && res.ptr == text.data() + text.size();
}

bool parse_bool(const std::string& text, bool& out) {
  std::string low = lower(text);
  bool yes = low == "true" || low == "yes" || low == "on";
  bool no = low == "false" || low == "no" || low == "off";
  if (yes || no) out = yes;
  return yes || no;
}

// A scalar for a number or bool: plain (unquoted), present. Returns "" or what is wrong.
std::string need_plain_scalar(const YAML::Node& n, const char* what) {
  if (n.IsNull()) return std::string("missing value, expected ") + what;
  if (!n.IsScalar()) return std::string("expected ") + what + ", got " + shown(n);
  if (is_quoted(n)) return shown(n) + " is a quoted string, not " + what;
  return "";
}

std::string parse_double_node(const YAML::Node& n, double& out) {
  if (std::string e = need_plain_scalar(n, "a number"); !e.empty()) return e;
  if (!parse_double(n.Scalar(), out)) return shown(n) + " is not a number";
  return "";
}

// Parses one value into its member of Config; returns "" or what is wrong with it.
std::string parse_value(const Field& f, const YAML::Node& n, Config& c) {
  void* p = f.get(c);
  switch (f.type) {
    case Type::Int:
    case Type::Int64: {
      if (std::string e = need_plain_scalar(n, "an integer"); !e.empty()) return e;
      std::int64_t v = 0;
      bool overflow = false;
      if (!parse_int64(n.Scalar(), v, overflow))
        return shown(n) + (!overflow ? " is not an integer" : n.Scalar()[0] == '-' ? " is too small" : " is too large");
      if (f.type == Type::Int) {
        if (v > std::numeric_limits<int>::max()) return shown(n) + " is too large";
        if (v < std::numeric_limits<int>::min()) return shown(n) + " is too small";
        *static_cast<int*>(p) = static_cast<int>(v);
      } else {
        *static_cast<std::int64_t*>(p) = v;
      }
      return "";
    }
    case Type::Float: return parse_double_node(n, *static_cast<double*>(p));
    case Type::Bool: {
      if (std::string e = need_plain_scalar(n, "true or false"); !e.empty()) return e;
      if (!parse_bool(n.Scalar(), *static_cast<bool*>(p))) return shown(n) + " is not true or false";
      return "";
    }
    case Type::String:
    case Type::Choice: {
      auto& s = *static_cast<std::string*>(p);
      if (n.IsNull()) {
        if (f.type != Type::String || f.nonempty || f.required) return "missing value";
        s.clear();  // "data.val:" with nothing after it: not set
        return "";
      }
      if (!n.IsScalar()) return "expected " + std::string(f.type == Type::Choice ? "a name" : "a string") + ", got " + shown(n);
      s = n.Scalar();
      return "";
    }
    case Type::Enum: {
      if (n.IsNull()) return "missing value";
      if (!n.IsScalar()) return "expected a name, got " + shown(n);
      const auto it = std::find(f.choices.begin(), f.choices.end(), n.Scalar());
      if (it == f.choices.end()) return schema::choice_error(f, n.Scalar());
      f.set_index(c, static_cast<int>(it - f.choices.begin()));
      return "";
    }
    case Type::Resume: {
      if (n.IsNull()) return "missing value";
      if (!n.IsScalar()) return "expected a string, got " + shown(n);
      auto& r = *static_cast<ResumeFrom*>(p);
      const std::string& text = n.Scalar();
      r.kind = text == "none"   ? ResumeFrom::Kind::None
               : text == "auto" ? ResumeFrom::Kind::Auto
                                : ResumeFrom::Kind::Path;
      r.path = r.kind == ResumeFrom::Kind::Path ? text : "";
      return "";
    }
    case Type::DataSources: return read_data_sources(n, *static_cast<std::string*>(p));
    case Type::FloatPair: {
      if (!n.IsSequence() || n.size() != 2)
        return "expected a list of two numbers, got " +
               (n.IsSequence() ? "a list of " + std::to_string(n.size()) : shown(n));
      auto& a = *static_cast<std::array<double, 2>*>(p);
      for (size_t i = 0; i < 2; ++i)
        if (std::string e = parse_double_node(n[i], a[i]); !e.empty()) return (i ? "second value: " : "first value: ") + e;
      return "";
    }
    case Type::IntList: {
      if (!n.IsSequence()) return "expected a list of integers such as [4, 4], got " + shown(n);
      auto& v = *static_cast<std::vector<int>*>(p);
      v.clear();
      for (size_t i = 0; i < n.size(); ++i) {
        const std::string at = "entry " + std::to_string(i) + ": ";
        if (std::string e = need_plain_scalar(n[i], "an integer"); !e.empty()) return at + e;
        std::int64_t x = 0;
        bool overflow = false;
        if (!parse_int64(n[i].Scalar(), x, overflow) || x > std::numeric_limits<int>::max() ||
            x < std::numeric_limits<int>::min())
          return at + shown(n[i]) + " is not an integer" + (overflow ? " of a usable size" : "");
        v.push_back(static_cast<int>(x));
      }
      return "";
    }
  }
  return "";
}

std::vector<std::string> keys_of(const std::string& section) {
  std::vector<std::string> keys;
  for (const Field& f : schema::fields())
    if (section == f.section) keys.push_back(f.key);
  return keys;
}

// What to say about a top-level name that is not a section.
std::string suggest_section(const std::string& name) {
  for (const Field& f : schema::fields())
    if (name == f.key) return "did you mean " + f.path() + "? keys go under their section";
  if (std::string alias = schema::known_alias(name); !alias.empty())
    return "did you mean " + alias + "? keys go under their section";
  std::string best = schema::closest(name, schema::sections());
  if (!best.empty()) return "did you mean " + best + "?";
  return "valid sections: " + join_text(schema::sections(), ", ");
}

// Reads the keys of a section's mapping (or of a nested mapping such as model.moe, whose keys the
// schema names "moe.KEY"; `prefix` is "moe." there) into entries.
void read_keys(const std::string& section, const std::string& prefix, const YAML::Node& body, const std::string& file,
               std::vector<Entry>& entries, KeyOrigins& origins) {
  for (auto kv = body.begin(); kv != body.end(); ++kv) {
    const YAML::Node k = kv->first;
    const YAML::Node v = kv->second;
    int line = line_of(k);
    if (!k.IsScalar()) fail(at(file, line), section, "a key must be a plain word, got " + shown(k));
    const std::string key = prefix + k.Scalar();
    const std::string path = section + "." + key;
    if (origins.line.count(path))
      fail(at(file, line), path, "duplicate key (first at line " + std::to_string(origins.line[path]) +
                                     "); keep one of them");
    const Field* f = schema::find(section, key);
    if (!f && schema::is_mapping(section, key)) {
      origins.line[path] = line;
      if (v.IsNull()) continue;  // "moe:" with nothing under it: validate() says what is missing
      if (!v.IsMap())
        fail(at(file, line), path, "expected a mapping of keys, got " + shown(v),
             "keys of " + path + ": " + join_text(schema::mapping_keys(section, key), ", "));
      read_keys(section, key + ".", v, file, entries, origins);
      continue;
    }
    if (!f) fail(at(file, line), path, "unknown key", schema::suggest_key(section, key));
    origins.line[path] = line;
    entries.push_back(Entry{f, v, at(file, line), line});
  }
}

// Reads the sections of the document into entries, checking names, duplicates and shapes.
void read_file_entries(const YAML::Node& root, const std::string& file, std::vector<Entry>& entries,
                       KeyOrigins& origins) {
  if (!root || root.IsNull()) return;
  if (!root.IsMap())
    fail(at(file, line_of(root)), "",
         "the config must be a mapping of sections (" + join_text(schema::sections(), ", ") +
             "), but the document is " + shown(root));
  // Nodes are copied out of the iterators: `it->first` lives in a temporary proxy.
  for (auto it = root.begin(); it != root.end(); ++it) {
    const YAML::Node kn = it->first;
    const YAML::Node body = it->second;
    int kline = line_of(kn);
    if (!kn.IsScalar()) fail(at(file, kline), "", "a section name must be a plain word, got " + shown(kn));
    std::string section = kn.Scalar();
    const auto& secs = schema::sections();
    if (std::find(secs.begin(), secs.end(), section) == secs.end())
      fail(at(file, kline), section, "unknown section", suggest_section(section));
    if (origins.line.count(section))
      fail(at(file, kline), section, "duplicate section (first at line " + std::to_string(origins.line[section]) +
                                         "); merge the two into one");
    origins.line[section] = kline;
    if (body.IsNull()) continue;  // "checkpoint:" with nothing under it: all defaults
    if (!body.IsMap())
      fail(at(file, kline), section, "expected a mapping of keys, got " + shown(body),
           "keys of " + section + ": " + join_text(keys_of(section), ", "));
    read_keys(section, "", body, file, entries, origins);
  }
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Applies "section.key=value" overrides on top of the file's entries.
void apply_overrides(const std::vector<std::string>& overrides, std::vector<Entry>& entries, KeyOrigins& origins) {
  for (const std::string& o : overrides) {
    size_t eq = o.find('=');
    std::string path = trim(o.substr(0, eq));
    std::string where = "--set " + path;
    if (eq == std::string::npos)
      fail(where, "", "expected section.key=value, e.g. --set train.steps=100");
    size_t dot = path.find('.');
    if (dot == std::string::npos) {
      std::string hint = "keys are written section.key, e.g. train.steps";
      for (const Field& f : schema::fields())
        if (path == f.key) hint = "did you mean " + f.path() + "?";
      if (std::string alias = schema::known_alias(path); !alias.empty()) hint = "did you mean " + alias + "?";
      fail(where, "", "not a section.key path", hint);
    }
    std::string section = path.substr(0, dot), key = path.substr(dot + 1);
    const auto& secs = schema::sections();
    if (std::find(secs.begin(), secs.end(), section) == secs.end())
      fail(where, "", "unknown section " + section, suggest_section(section));
    const Field* f = schema::find(section, key);
    if (!f && schema::is_mapping(section, key))
      fail(where, "", "a mapping, not a key", "set its keys one by one, e.g. --set " + path + "." +
                                                  schema::mapping_keys(section, key).front() + "=...");
    if (!f) fail(where, "", "unknown key", schema::suggest_key(section, key));
    std::string text = o.substr(eq + 1);
    YAML::Node value;
    try {
      value = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      fail(where + "=" + text, "", "not a YAML value: " + e.msg,
           "quote strings with special characters, write lists as [a, b]");
    }
    auto it = std::find_if(entries.begin(), entries.end(), [&](const Entry& en) { return en.field == f; });
    if (it != entries.end()) {
      // reset() rebinds the entry to the new node. Assigning a YAML::Node would instead write into
      // the node it refers to, which a YAML alias (`steps: *dm`) shares with its anchor's key.
      it->value.reset(value);
      it->where = where;
      it->line = 0;
    } else {
      entries.push_back(Entry{f, value, where, 0});
    }
    origins.overridden.insert(path);
  }
}

// A required key nobody gave; a model key also says why model.init_from did not give it.
[[noreturn]] void missing_required(const Config& cfg, const Field& f) {
  const std::string& file = cfg.origins.file;
  auto sec = cfg.origins.line.find(f.section);
  std::string why;
  if (std::string(f.section) == "model" && !cfg.model.init_from.empty()) {
    std::error_code ec;
    why = std::filesystem::is_directory(cfg.model.init_from, ec)
              ? "; model.init_from's config.json does not give it"
              : "; model.init_from " + cfg.model.init_from + " is not a Hugging Face folder, whose config.json would give it";
  }
  fail(at(file, sec == cfg.origins.line.end() ? 0 : sec->second), f.path(), "missing required key" + why,
       schema::valid_text(f));
}

// parse_config, and with read_init_from the model's shape from model.init_from's folder.
Config parse(const std::string& yaml_text, const std::string& source_name, const std::vector<std::string>& overrides,
             bool read_init_from) {
  const std::string& file = source_name;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) fail(file, "", "YAML syntax error: " + e.msg);
    fail(at(file, e.mark.line + 1), "",
         "YAML syntax error at column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }

  Config cfg;
  cfg.origins.file = file;
  std::vector<Entry> entries;
  read_file_entries(root, file, entries, cfg.origins);
  apply_overrides(overrides, entries, cfg.origins);

  for (const Entry& e : entries) {
    std::string path = e.field->path();
    std::string wrong = parse_value(*e.field, e.value, cfg);
    if (wrong.empty()) wrong = schema::check_value(*e.field, cfg);
    if (!wrong.empty()) fail(e.where, path, wrong, schema::valid_text(*e.field));
  }
  if (read_init_from) model_from_init_folder(cfg);
  for (const Field& f : schema::fields())
    if (f.required && !cfg.origins.given(f.path()) && !cfg.origins.from_folder.count(f.path()))
      missing_required(cfg, f);
  if (cfg.train.seq_len == 0) cfg.train.seq_len = cfg.model.seq_len;
  return cfg;
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides) {
  return parse(yaml_text, source_name, overrides, /*read_init_from=*/false);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (path.empty()) TETRA_FAIL(Config, "no config file given; pass a YAML config, e.g. configs/tiny.yaml");
  if (!fs::exists(st))
    TETRA_FAIL(Config, path, ": config file not found (working directory ", fs::current_path(ec).string(),
               "); pass the path of a YAML config, e.g. configs/tiny.yaml");
  if (fs::is_directory(st))
    TETRA_FAIL(Config, path, ": is a directory, not a config file; pass a YAML file, e.g. configs/tiny.yaml");
  std::ifstream in(path, std::ios::binary);
  if (!in) TETRA_FAIL(Config, path, ": cannot read the config file: ", std::strerror(errno), "; check its permissions");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) TETRA_FAIL(Config, path, ": error while reading the config file: ", std::strerror(errno));
  return parse(text.str(), path, overrides, /*read_init_from=*/true);
}

}  // namespace tetra::launch
