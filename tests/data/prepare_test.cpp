// `tetra data prepare`'s input side and document tokens: JSONL, .gz and .zst inputs, globs, the
// same output for any number of workers, end- and begin-of-document tokens at the right places with
// /doc_offsets, uint32 tokens above 65,536 ids (a fake tokenizer), and errors that leave no output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/data_tools.h"
#include "data/formats/megatron_dataset.h"
#include "data/token_dataset.h"
#include "data/tokenizers/tokenizer.h"
#include "data_fixtures.h"
#include "runtime/error.h"

namespace tetra::data {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::error_of;
using testing::ScratchDir;

// Byte b -> id 65000 + b (so ids exceed uint16), "<eos>" 69999, "<bos>" 69998; eos named by its "config".
class FakeTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "fake"; }
  int64_t vocab_size() const override { return 70000; }
  void encode(std::string_view text, std::vector<uint32_t>& out) const override {
    for (char c : text) out.push_back(65000u + static_cast<unsigned char>(c));
  }
  std::string decode(const int32_t*, int64_t) const override { return ""; }
  std::string decode_escaped(const int32_t*, int64_t) const override { return ""; }
  std::optional<uint32_t> token_id(std::string_view t) const override {
    if (t == "<eos>") return 69999;
    if (t == "<bos>") return 69998;
    return std::nullopt;
  }
  DocumentTokens document_tokens() const override { return {has_eos ? std::optional<std::string>("<eos>") : std::nullopt, {}}; }
  std::string file_sha256() const override { return "ab12"; }
  bool has_eos = true;
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

void write_zstd(const std::string& path, const std::string& bytes) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), 3);
  ASSERT_FALSE(ZSTD_isError(n));
  out.resize(n);
  write_file(path, out);
}

std::vector<int32_t> all_tokens(const std::string& path) {
  auto d = TokenDataset::open(path);
  std::vector<int32_t> ids(static_cast<size_t>(d->size()));
  d->read(0, d->size(), ids.data());
  return ids;
}

std::vector<int32_t> bytes_as_ids(const std::string& s, int32_t add = 0) {
  std::vector<int32_t> out;
  for (char c : s) out.push_back(add + static_cast<unsigned char>(c));
  return out;
}

TEST(Prepare, JsonlGzipZstdAndGlobsReadInOrder) {
  ScratchDir dir;
  fs::create_directory(dir.file("in"));
  write_file(dir.file("in/a.jsonl"), "{\"text\": \"alpha\", \"id\": 1}\n{\"id\": 2, \"text\": \"b\\u00e9ta\\n\"}\n");
  write_gzip(dir.file("in/b.jsonl.gz"), "{\"text\": \"gamma\"}\n{\"text\": \"\"}\n{\"text\": \"delta\"}");  // no final newline
  write_zstd(dir.file("in/c.jsonl.zst"), "{\"body\": 1, \"text\": \"epsilon\"}\n");
  const std::string out = dir.file("j.h5");
  std::ostringstream log;
  prepare_dataset({.inputs = {dir.file("in/*.jsonl*")}, .out = out, .format = "jsonl", .workers = 2}, log);
  const std::string text = "alpha" "b\xc3\xa9ta\n" "gamma" "delta" "epsilon";
  EXPECT_EQ(all_tokens(out), bytes_as_ids(text));
  EXPECT_EQ(TokenDataset::open(out)->doc_offsets(), (std::vector<int64_t>{0, 5, 11, 16, 21}));
  EXPECT_THAT(log.str(), AllOf(HasSubstr("3 files"), HasSubstr("5 documents"), HasSubstr("1 empty documents skipped"),
                               HasSubstr("eos none")));

  // Plain text files, compressed or not: a file is one document.
  write_gzip(dir.file("t1.txt.gz"), "one\n");
  write_zstd(dir.file("t2.txt.zst"), std::string(3 << 20, 'z'));  // several zstd output buffers
  prepare_dataset({.inputs = {dir.file("t1.txt.gz"), dir.file("t2.txt.zst")}, .out = out}, log);
  auto d = TokenDataset::open(out);
  EXPECT_EQ(d->size(), 4 + (3 << 20));
  EXPECT_EQ(d->doc_offsets(), (std::vector<int64_t>{0, 4}));
}

TEST(Prepare, OutputIsTheSameForAnyNumberOfWorkers) {
  ScratchDir dir;
  std::string jsonl;
  for (int i = 0; i < 3000; ++i) {
    jsonl += "{\"text\": \"document ";
    jsonl += std::to_string(i);
    jsonl.append(static_cast<size_t>(i % 700), 'x');
    jsonl += "\"}\n";
  }
  write_file(dir.file("docs.jsonl"), jsonl);
  std::ostringstream log;
  FakeTokenizer tok;
  for (int workers : {1, 3})
    prepare_dataset({.inputs = {dir.file("docs.jsonl")}, .out = dir.file(workers == 1 ? "w1" : "w3"),
                     .format = "jsonl", .workers = workers, .out_format = "megatron"},
                    tok, log);
  for (const char* ext : {".bin", ".idx"})
    EXPECT_EQ(testing::read_raw(dir.file(std::string("w1") + ext)), testing::read_raw(dir.file(std::string("w3") + ext)))
        << ext << " differs between 1 and 3 workers";
  EXPECT_GT(fs::file_size(dir.file("w1.bin")), size_t{2} << 20) << "more than one batch per worker";
}

TEST(Prepare, DocumentTokensDocOffsetsAndUint32) {
  ScratchDir dir;
  write_file(dir.file("a.txt"), "ab");
  write_file(dir.file("b.txt"), "c");
  const std::string out = dir.file("e.h5");
  std::ostringstream log;
  FakeTokenizer tok;
  prepare_dataset({.inputs = {dir.file("a.txt"), dir.file("b.txt")}, .out = out}, tok, log);  // eos: its own
  EXPECT_EQ(all_tokens(out), (std::vector<int32_t>{65097, 65098, 69999, 65099, 69999}));
  auto d = TokenDataset::open(out);
  EXPECT_EQ(d->token_dtype(), DType::U32);
  EXPECT_EQ(d->vocab_size(), 70000);
  EXPECT_EQ(d->tokenizer(), "fake");
  EXPECT_EQ(d->tokenizer_sha256(), "ab12");  // the attribute names the tokenizer's file
  std::ostringstream info;
  inspect_dataset(out, info);
  EXPECT_THAT(info.str(), AllOf(HasSubstr("tokenizer:  fake (file sha256 ab12)"), HasSubstr("dtype:      uint32"),
                                HasSubstr("ids used:   4 distinct, max 69999 (vocab_size 70000)")));
  EXPECT_EQ(d->doc_offsets(), (std::vector<int64_t>{0, 3}));
  EXPECT_THAT(log.str(), AllOf(HasSubstr("uint32"), HasSubstr("eos id 69999"), HasSubstr("bos none")));

  prepare_dataset({.inputs = {dir.file("a.txt"), dir.file("b.txt")}, .out = out, .eos = "none", .bos = "<bos>"}, tok,
                  log);
  EXPECT_EQ(all_tokens(out), (std::vector<int32_t>{69998, 65097, 65098, 69998, 65099}));
  prepare_dataset({.inputs = {dir.file("a.txt"), dir.file("b.txt")}, .out = dir.file("m"), .bos = "<bos>",
                   .out_format = "megatron"},
                  tok, log);
  EXPECT_EQ(all_tokens(dir.file("m")), (std::vector<int32_t>{69998, 65097, 65098, 69999, 69998, 65099, 69999}));
  auto m = TokenDataset::open(dir.file("m.idx"));
  EXPECT_EQ(m->format(), "megatron indexed (int32)");
  EXPECT_EQ(m->doc_offsets(), (std::vector<int64_t>{0, 4}));

  // The byte tokenizer has no document tokens: none by default; a single byte may be named.
  prepare_dataset({.inputs = {dir.file("a.txt"), dir.file("b.txt")}, .out = out, .eos = "\n"}, log);
  EXPECT_EQ(all_tokens(out), (std::vector<int32_t>{'a', 'b', '\n', 'c', '\n'}));
  EXPECT_EQ(TokenDataset::open(out)->token_dtype(), DType::U16);
}

TEST(Prepare, BadInputsAndOptionsAreClearErrorsAndLeaveNoOutput) {
  ScratchDir dir;
  const std::string out = dir.file("x.h5");
  std::ostringstream log;
  FakeTokenizer tok;
  write_file(dir.file("a.txt"), "ab");
  write_file(dir.file("bad.jsonl"), "{\"text\": \"ok\"}\n[1, 2]\n");
  write_file(dir.file("nofield.jsonl"), "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  write_file(dir.file("num.jsonl"), "{\"text\": 5}\n");
  write_file(dir.file("blank.jsonl"), "{\"text\": \"ok\"}\n\n{\"text\": \"ok\"}\n");
  write_file(dir.file("broken.jsonl"), "{\"text\": \"ok\"\n");
  write_file(dir.file("fake.gz"), "not gzip at all");
  std::string noise(1 << 16, '\0');  // incompressible, so half the frame is half the data
  uint32_t x = 1;
  for (char& c : noise) c = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
  std::string cut(ZSTD_compressBound(noise.size()), '\0');
  cut.resize(ZSTD_compress(cut.data(), cut.size(), noise.data(), noise.size(), 1) / 2);
  write_file(dir.file("cut.txt.zst"), cut);
  auto jsonl = [&](const std::string& f) {
    return error_of([&] { prepare_dataset({.inputs = {dir.file(f)}, .out = out, .format = "jsonl"}, log); });
  };
  EXPECT_THAT(jsonl("bad.jsonl"), AllOf(HasSubstr("bad.jsonl:2"), HasSubstr("not an object")));
  EXPECT_THAT(jsonl("nofield.jsonl"), AllOf(HasSubstr("nofield.jsonl:2"), HasSubstr("no member \"text\""), HasSubstr("--field")));
  EXPECT_THAT(jsonl("num.jsonl"), AllOf(HasSubstr("num.jsonl:1"), HasSubstr("not a string")));
  EXPECT_THAT(jsonl("blank.jsonl"), AllOf(HasSubstr("blank.jsonl:2"), HasSubstr("empty line")));
  EXPECT_THAT(jsonl("broken.jsonl"), AllOf(HasSubstr("broken.jsonl:1"), HasSubstr("not valid JSON")));
  EXPECT_THAT(error_of([&] { prepare_dataset({.inputs = {dir.file("fake.gz")}, .out = out}, log); }),
              AllOf(HasSubstr("fake.gz"), HasSubstr("not valid gzip")));
  EXPECT_THAT(error_of([&] { prepare_dataset({.inputs = {dir.file("cut.txt.zst")}, .out = out}, log); }),
              AllOf(HasSubstr("cut.txt.zst"), HasSubstr("truncated")));
  EXPECT_THAT(error_of([&] { prepare_dataset({.inputs = {dir.file("none_*.txt")}, .out = out}, log); }),
              HasSubstr("no file matches"));
  tok.has_eos = false;
  EXPECT_THAT(error_of([&] { prepare_dataset({.inputs = {dir.file("a.txt")}, .out = out}, tok, log); }),
              AllOf(HasSubstr("names no end-of-document token"), HasSubstr("--eos TOKEN"), HasSubstr("--eos none")));
  EXPECT_THAT(error_of([&] { prepare_dataset({.inputs = {dir.file("a.txt")}, .out = out, .eos = "<x>"}, tok, log); }),
              AllOf(HasSubstr("--eos '<x>'"), HasSubstr("not a token of tokenizer fake")));
  EXPECT_THAT(error_of([&] {
                prepare_dataset({.inputs = {dir.file("a.txt")}, .out = out, .out_format = "parquet"}, log);
              }),
              HasSubstr("--out-format parquet"));
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().string().find("x.h5"), std::string::npos) << "left behind: " << e.path();
}

}  // namespace
}  // namespace tetra::data
