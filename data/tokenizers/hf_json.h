// Reading the parts of a Hugging Face tokenizer.json: typed field access whose errors name the
// file and the part, so an unsupported or malformed file is a clear Data error, never a silent
// difference from Hugging Face's ids.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tetra::data::tok {

using Json = nlohmann::json;

// "tokenizer.json: <what> is not supported" (what names the part: "normalizer type 'Lowercase'").
[[noreturn]] void unsupported(std::string_view what);
// "tokenizer.json: <what>" for a field of the wrong shape.
[[noreturn]] void malformed(std::string_view what);

// The `type` field of part `part` ("normalizer", "pre_tokenizer", ...).
std::string type_of(const Json& j, std::string_view part);
std::string string_field(const Json& j, const char* key, std::string_view part);
// A boolean field; `fallback` where it is absent or null.
bool bool_field(const Json& j, const char* key, std::string_view part, bool fallback);
// A pattern {"String": s} or {"Regex": r}: sets `is_regex`.
std::string pattern_field(const Json& j, std::string_view part, bool& is_regex);

// Metaspace's prepend_scheme ("always", "first", "never"); older files say add_prefix_space instead.
std::string metaspace_scheme(const Json& j, std::string_view part);

}  // namespace tetra::data::tok
