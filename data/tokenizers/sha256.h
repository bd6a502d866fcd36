// SHA-256 of a file, as lowercase hex: names the tokenizer file a dataset was made with.
#pragma once
#include <string>

namespace tetra::data::tok {

std::string sha256_hex(const std::string& bytes);
// Reads `path` whole (a Data error naming it when it cannot be read).
std::string read_file_bytes(const std::string& path);

}  // namespace tetra::data::tok
