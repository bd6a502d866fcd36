// The text of one JSONL document: `line` must be a JSON object whose member `field` is a string.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace tetra::data {

// The string under `field` of the JSON object on `line`, or a Data error naming `file`:`line_no`
// (not JSON, not an object, no such member, or not a string: the message says which).
std::string jsonl_text(std::string_view line, const std::string& field, const std::string& file, int64_t line_no);

}  // namespace tetra::data
