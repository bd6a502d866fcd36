// Hugging Face tokenizer.json against Hugging Face's own Python `tokenizers` (on the GPU machine,
// which has it; skipped elsewhere): the same ids for GPT-2, Llama 3 and Llama 2 on the stress texts.
#include <gtest/gtest.h>

#include "data/tokenizers/tokenizer.h"
#include "tokenizer_test_util.h"

namespace tetra::data {
namespace {

class HfPython : public ::testing::TestWithParam<std::string> {};

TEST_P(HfPython, IdsEqualHuggingFaceTokenizers) {
  const std::string dir = testing::fixture_tokenizer_dir(GetParam());
  if (dir.empty()) GTEST_SKIP() << "tokenizer fixtures not installed (scripts/setup.sh --test)";
  const std::string python = TETRA_PYTHON;
  if (testing::run_command(python + " -c 'import tokenizers' 2>/dev/null").status != 0)
    GTEST_SKIP() << python << " has no 'tokenizers' package";
  testing::ScratchDir scratch;
  const auto texts = testing::stress_texts();
  const auto expected = testing::reference_ids(
      scratch, python + " " + testing::shell_quote(std::string(TETRA_SOURCE_DIR) + "/tests/data/tokenizers/hf_reference.py") + " " +
                   testing::shell_quote(dir), texts);
  ASSERT_EQ(expected.size(), texts.size());
  const auto tok = make_tokenizer(dir + "/tokenizer.json");
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<uint32_t> got;
    tok->encode(texts[i].bytes, got);
    EXPECT_EQ(got, expected[i]) << "text '" << texts[i].name << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Files, HfPython, ::testing::Values("gpt2", "llama3", "llama2"));

}  // namespace
}  // namespace tetra::data
