// data.train / data.val values: YAML ↔ canonical text ↔ data::DataSpec (launch/config/data.h).
#include "launch/config/data.h"

#include <cmath>

#include "launch/config/schema.h"
#include "runtime/error.h"
#include "runtime/text_join.h"

namespace tetra::launch {

namespace {

bool is_quoted(const YAML::Node& n) { return n.Tag() == "!"; }

std::string shown(const YAML::Node& n) {
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "an empty value";
  return is_quoted(n) ? "\"" + n.Scalar() + "\"" : n.Scalar();
}

// One path or glob: a non-empty scalar that cannot be mistaken for a list.
std::string read_path(const YAML::Node& n, std::string& out) {
  if (!n.IsScalar()) return "expected a path, got " + shown(n);
  out = n.Scalar();
  if (out.empty()) return "an empty path";
  if (out[0] == '[' || out[0] == '{') return "a path may not start with '" + out.substr(0, 1) + "'";
  return "";
}

// The paths of one blend entry: a path, or a list of paths.
std::string read_paths(const YAML::Node& n, std::vector<std::string>& out) {
  out.clear();
  if (n.IsSequence()) {
    if (n.size() == 0) return "path: an empty list";
    for (size_t i = 0; i < n.size(); ++i) {
      std::string p;
      if (std::string e = read_path(n[i], p); !e.empty()) return "path " + std::to_string(i + 1) + ": " + e;
      out.push_back(p);
    }
    return "";
  }
  std::string p;
  if (std::string e = read_path(n, p); !e.empty()) return "path: " + e;
  out.push_back(p);
  return "";
}

std::string list_text(const std::vector<std::string>& paths) {
  return bracketed_text(paths, ", ", schema::quote_if_needed);
}

// Fills spec and canonical from a node; returns "" or what is wrong.
std::string read_node(const YAML::Node& n, data::DataSpec& spec, std::string& canonical) {
  spec.sources.clear();
  spec.blend = false;
  canonical.clear();
  if (!n || n.IsNull()) return "";
  if (n.IsScalar() && n.Scalar().empty()) return "";  // data.val: "" — not set
  if (n.IsScalar()) {
    std::string p;
    if (std::string e = read_path(n, p); !e.empty()) return e;
    spec.sources.push_back({{p}, 1.0});
    canonical = p;
    return "";
  }
  if (n.IsMap())
    return "expected a path, a list of paths, or a list of {path, weight} entries, got a mapping (write one "
           "dataset of a blend as a list entry: [{path: a.h5, weight: 1}])";
  if (!n.IsSequence()) return "expected a path or a list, got " + shown(n);
  if (n.size() == 0) return "an empty list; give at least one token file";
  const bool blend = n[0].IsMap();
  std::vector<std::string> shards;
  std::string text = "[";
  for (size_t i = 0; i < n.size(); ++i) {
    const YAML::Node e = n[i];
    const std::string at = "entry " + std::to_string(i + 1) + ": ";
    if (e.IsMap() != blend)
      return at + "mixes plain paths with {path, weight} entries; write every entry of a blend as {path: ..., weight: ...}";
    if (!blend) {
      std::string p;
      if (std::string err = read_path(e, p); !err.empty()) return at + err;
      shards.push_back(p);
      continue;
    }
    data::SourceSpec src;
    bool has_path = false, has_weight = false;
    for (auto kv = e.begin(); kv != e.end(); ++kv) {
      const YAML::Node k = kv->first, v = kv->second;
      const std::string key = k.IsScalar() ? k.Scalar() : "";
      if (key == "path") {
        if (std::string err = read_paths(v, src.paths); !err.empty()) return at + err;
        has_path = true;
      } else if (key == "weight") {
        double w = 0;
        bool ok = v.IsScalar() && !is_quoted(v);
        if (ok) {
          try {
            w = v.as<double>();
          } catch (const YAML::Exception&) {
            ok = false;
          }
        }
        if (!ok || !std::isfinite(w) || w <= 0) return at + "weight " + shown(v) + " is not a positive number";
        src.weight = w;
        has_weight = true;
      } else {
        return at + "unknown key " + (key.empty() ? shown(k) : key) + " (an entry has path and weight)";
      }
    }
    if (!has_path) return at + "missing path";
    if (!has_weight) return at + "missing weight (a blend gives every dataset a weight, e.g. weight: 0.3)";
    text += std::string(i ? ", " : "") + "{path: " +
            (src.paths.size() == 1 ? schema::quote_if_needed(src.paths[0]) : list_text(src.paths)) +
            ", weight: " + schema::format_double(src.weight) + "}";
    spec.sources.push_back(std::move(src));
  }
  if (blend) {
    spec.blend = true;
    canonical = text + "]";
  } else {
    spec.sources.push_back({shards, 1.0});
    canonical = list_text(shards);
  }
  return "";
}

}  // namespace

std::string read_data_sources(const YAML::Node& value, std::string& canonical) {
  data::DataSpec spec;
  return read_node(value, spec, canonical);
}

data::DataSpec data_spec(const std::string& text, const std::string& key) {
  data::DataSpec spec;
  spec.key = key;
  if (text.empty()) return spec;
  if (text[0] != '[') {  // a path or glob, as written (it may hold characters YAML would read otherwise)
    spec.sources.push_back({{text}, 1.0});
    return spec;
  }
  YAML::Node n;
  try {
    n = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    TETRA_FAIL(Config, key, ": cannot read ", text, ": ", e.msg);
  }
  std::string canonical;
  if (std::string e = read_node(n, spec, canonical); !e.empty()) TETRA_FAIL(Config, key, ": ", e);
  spec.key = key;
  return spec;
}

std::string data_sources_yaml(const std::string& text) {
  return !text.empty() && text[0] == '[' ? text : schema::quote_if_needed(text);
}

const char* data_sources_valid_text() {
  return "a token file, a glob (\"data/train_*.bin\"), a list of shards [a.bin, b.bin], or a blend "
         "[{path: a.h5, weight: 0.7}, {path: \"b_*.bin\", weight: 0.3}]";
}

}  // namespace tetra::launch
