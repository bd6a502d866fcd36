// SentencePiece .model: a small model trained at test time by Debian's spm_train on the licence
// texts in tests/data/text/; ids equal spm_encode's on the stress texts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "data/tokenizers/tokenizer.h"
#include "tokenizer_test_util.h"

namespace tetra::data {
namespace {

using testing::ScratchDir;
using testing::shell_quote;

TEST(SentencePieceTokenizer, IdsEqualSpmEncode) {
  if (testing::run_command("command -v spm_train && command -v spm_encode").status != 0)
    GTEST_SKIP() << "spm_train/spm_encode are not installed (Debian package sentencepiece; scripts/setup.sh --test)";
  ScratchDir dir;
  const std::string text = std::string(TETRA_SOURCE_DIR) + "/tests/data/text/";
  const auto trained = testing::run_command(
      "spm_train --input=" + shell_quote(text + "GPL-3") + "," + shell_quote(text + "Apache-2.0") + " --model_prefix=" +
      shell_quote(dir.file("sp")) + " --vocab_size=600 --model_type=bpe --byte_fallback=true --character_coverage=1.0 2>&1");
  ASSERT_EQ(trained.status, 0) << trained.output;
  const auto tok = make_tokenizer(dir.file("sp.model"));
  EXPECT_EQ(tok->vocab_size(), 600);
  EXPECT_EQ(tok->document_tokens().eos, "</s>");
  EXPECT_EQ(tok->file_sha256().size(), 64u);
  for (const auto& t : testing::stress_texts()) {
    if (t.bytes.find('\n') != std::string::npos) continue;  // spm_encode reads one sentence per line
    const std::string in = dir.file(t.name + ".txt");
    testing::write_raw(in, t.bytes + "\n");
    const auto r = testing::run_command("spm_encode --model=" + shell_quote(dir.file("sp.model")) +
                                        " --output_format=id < " + shell_quote(in));
    ASSERT_EQ(r.status, 0) << r.output;
    std::vector<uint32_t> expected;
    std::istringstream ids(r.output);
    for (uint32_t id; ids >> id;) expected.push_back(id);
    std::vector<uint32_t> got;
    tok->encode(t.bytes, got);
    EXPECT_EQ(got, expected) << "text '" << t.name << "'";
    if (t.name == "english") {
      const std::vector<int32_t> back(got.begin(), got.end());
      EXPECT_EQ(tok->decode(back.data(), static_cast<int64_t>(back.size())), t.bytes);
    }
  }
}

}  // namespace
}  // namespace tetra::data
