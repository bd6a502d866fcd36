#include "data/prepare/jsonl_text.h"

#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace tetra::data {

std::string jsonl_text(std::string_view line, const std::string& field, const std::string& file, int64_t line_no) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos)
      TETRA_FAIL(Data, file, ":", line_no, ": empty line; a JSONL input holds one JSON object per line");
    TETRA_FAIL(Data, file, ":", line_no, ": not valid JSON (or not UTF-8); a JSONL input holds one JSON object per "
               "line");
  }
  if (!j.is_object()) TETRA_FAIL(Data, file, ":", line_no, ": a JSON ", j.type_name(), ", not an object");
  const auto it = j.find(field);
  if (it == j.end())
    TETRA_FAIL(Data, file, ":", line_no, ": the object has no member \"", field, "\"; name the text's member with "
               "--field");
  if (!it->is_string())
    TETRA_FAIL(Data, file, ":", line_no, ": member \"", field, "\" is a ", it->type_name(), ", not a string");
  return it->get<std::string>();
}

}  // namespace tetra::data
