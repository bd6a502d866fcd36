#include "data/tokenizers/hf_json.h"

#include "runtime/error.h"

namespace tetra::data::tok {

void unsupported(std::string_view what) { TETRA_FAIL(Data, "tokenizer.json: ", what, " is not supported"); }

void malformed(std::string_view what) { TETRA_FAIL(Data, "tokenizer.json: ", what); }

std::string type_of(const Json& j, std::string_view part) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    malformed(std::string(part) + " has no \"type\"");
  return j["type"].get<std::string>();
}

std::string string_field(const Json& j, const char* key, std::string_view part) {
  if (!j.contains(key) || !j[key].is_string())
    malformed(std::string(part) + " needs a string \"" + key + "\"");
  return j[key].get<std::string>();
}

bool bool_field(const Json& j, const char* key, std::string_view part, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) malformed(std::string(part) + " \"" + key + "\" is not true or false");
  return j[key].get<bool>();
}

std::string pattern_field(const Json& j, std::string_view part, bool& is_regex) {
  const Json* p = j.contains("pattern") ? &j["pattern"] : nullptr;
  if (p && p->is_object() && p->contains("String") && (*p)["String"].is_string()) {
    is_regex = false;
    return (*p)["String"].get<std::string>();
  }
  if (p && p->is_object() && p->contains("Regex") && (*p)["Regex"].is_string()) {
    is_regex = true;
    return (*p)["Regex"].get<std::string>();
  }
  malformed(std::string(part) + " needs a \"pattern\" {\"String\": ...} or {\"Regex\": ...}");
}

std::string metaspace_scheme(const Json& j, std::string_view part) {
  if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) return j["prepend_scheme"].get<std::string>();
  return bool_field(j, "add_prefix_space", part, true) ? "always" : "never";
}

}  // namespace tetra::data::tok
