// tokenizer_config.json beside a tokenizer file (Hugging Face's convention): which tokens end and
// begin a document.
#pragma once
#include <string>

#include "data/tokenizers/tokenizer.h"

namespace tetra::data::tok {

// Reads `dir`/tokenizer_config.json: eos_token, and bos_token where add_bos_token is true (each a
// string or {"content": ...}). Nothing where the file is absent; a Data error naming it where it
// is not JSON.
DocumentTokens read_tokenizer_config(const std::string& dir);

}  // namespace tetra::data::tok
