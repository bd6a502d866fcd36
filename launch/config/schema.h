// The config schema as data: one row per key (section.key, type, range or choices, required),
// with a pointer into Config. load_config, validate and to_yaml all walk this one table, so a key
// added here is parsed, range-checked, emitted and round-tripped without further code.
#pragma once
#include <limits>
#include <string>
#include <vector>

#include "launch/config/config.h"

namespace tetra::launch::schema {

// Choice: a name among `choices` kept as text (model.arch: the registered families).
// Enum: a name among `choices` kept as an enum whose value i is choices[i] (ChoiceText in config.h);
// read and written through `index` and `set_index`.
// Resume: checkpoint.resume (ResumeFrom): none, auto or a path.
// DataSources: data.train / data.val — a path, glob, list or blend, stored as text (config_data.h).
// IntList: a list of integers (std::vector<int>), each in [lo, hi]; [] when not set.
enum class Type { Int, Int64, Float, Bool, String, Choice, Enum, Resume, FloatPair, IntList, DataSources };

struct Field {
  const char* section;
  const char* key;
  Type type;
  void* (*get)(Config&);                 // the member of Config this key sets
  int (*index)(const Config&) = nullptr;     // Type::Enum: the member's value as an index into choices
  void (*set_index)(Config&, int) = nullptr; // Type::Enum: sets the member to choices[i]'s value
  bool required = false;
  double lo = -std::numeric_limits<double>::infinity();  // numeric range
  bool lo_open = false;                  // lo itself excluded
  double hi = std::numeric_limits<double>::infinity();
  bool hi_open = false;
  std::vector<std::string> choices = {}; // Type::Choice and Type::Enum
  bool nonempty = false;                 // Type::String: "" is not allowed
  const char* note = "";                 // appended to "what would be valid": meaning of 0, an example

  std::string path() const { return std::string(section) + "." + key; }
  const void* cget(const Config& c) const { return get(const_cast<Config&>(c)); }
};

// The sections in file order, and every key in file order within its section.
const std::vector<std::string>& sections();
const std::vector<Field>& fields();
const Field* find(const std::string& section, const std::string& key);
// Nested mappings: a key of the form "NAME.KEY" (model.moe.n_experts: section "model", key
// "moe.n_experts") is written in YAML under a mapping NAME of its section. is_mapping: some key of
// `section` lies under `name`; mapping_keys: those keys without the "NAME." prefix, in schema order.
bool is_mapping(const std::string& section, const std::string& name);
std::vector<std::string> mapping_keys(const std::string& section, const std::string& name);

// "what would be valid" for a key: "an integer ≥ 1; 0 = off", "one of: fp32, bf16", ...
std::string valid_text(const Field& f);

// The value of a key as it is written in YAML (strings quoted where YAML would misread them).
std::string value_text(const Field& f, const Config& c);

// Checks a value against its range, choices and emptiness; returns "" or what is wrong
// ("-3 is below the minimum", "\"fp16\" is not a valid choice").
std::string check_value(const Field& f, const Config& c);

// What is wrong with `text` as a value of a Choice or Enum key: "\"fp16\" is not a valid choice
// (did you mean fp32?)".
std::string choice_error(const Field& f, const std::string& text);

// The closest known name to `name` (for "did you mean"), or "" when none is close.
std::string closest(const std::string& name, const std::vector<std::string>& candidates);

// The key that another trainer's name stands for ("train_iters" → "train.steps"), or "".
std::string known_alias(const std::string& name);

// A suggestion for an unknown key in a section: "did you mean train.steps?" or the valid keys.
std::string suggest_key(const std::string& section, const std::string& key);

// A string as a YAML scalar that reads back as the same string.
std::string quote_if_needed(const std::string& s);

// A double in the shortest form that reads back to the same value (3e-4, 0.95, 600).
std::string format_double(double v);

}  // namespace tetra::launch::schema
