// `tetra data prepare` / `inspect`: a round trip on real text gives tokens equal to the file's
// bytes, the file is what other HDF5 readers expect, and bad inputs leave no output behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "data/data_tools.h"
#include "data/token_dataset.h"
#include "data_fixtures.h"
#include "runtime/error.h"

namespace tetra::data {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::error_of;
using testing::ScratchDir;

// Two licence texts kept in the repository (tests/data/text/), so every machine tokenizes the same bytes.
const std::string kGpl = std::string(TETRA_SOURCE_DIR) + "/tests/data/text/GPL-3";
const std::string kApache = std::string(TETRA_SOURCE_DIR) + "/tests/data/text/Apache-2.0";

std::string tetra_bin() {
  const char* b = std::getenv("TETRA_BIN");
  return b ? b : std::string(TETRA_BINARY_DIR) + "/tetra";
}

TEST(DataTools, PrepareThenInspectRoundTripsRealText) {
  ScratchDir dir;
  const std::string out = dir.file("licenses.h5");
  std::ostringstream log;
  prepare_dataset({.inputs = {kGpl, kApache}, .tokenizer = "byte", .out = out}, log);
  const std::string gpl = testing::read_raw(kGpl), apache = testing::read_raw(kApache);
  const std::string all = gpl + apache;
  const std::string summary = log.str();
  EXPECT_THAT(summary, AllOf(HasSubstr(out), HasSubstr("2 files"), HasSubstr(std::to_string(all.size()) + " tokens"),
                             HasSubstr(std::to_string(all.size()) + " bytes")));
  EXPECT_EQ(std::count(summary.begin(), summary.end(), '\n'), 1) << "one-line summary: " << summary;
  EXPECT_FALSE(fs::exists(out + ".tmp"));

  auto d = TokenDataset::open(out);
  EXPECT_EQ(d->size(), static_cast<int64_t>(all.size()));
  EXPECT_EQ(d->vocab_size(), 256);
  EXPECT_EQ(d->tokenizer(), "byte");
  EXPECT_EQ(d->token_dtype(), DType::U16);
  EXPECT_GE(d->contiguous_offset(), 0);
  EXPECT_EQ(d->doc_offsets(), (std::vector<int64_t>{0, static_cast<int64_t>(gpl.size())}));
  std::vector<int32_t> ids(all.size());
  d->read(0, d->size(), ids.data());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(ids[i], static_cast<unsigned char>(all[i])) << "byte " << i;

  std::ostringstream info;
  inspect_dataset(out, info);
  std::string first;
  for (int i = 0; i < 32; ++i) {
    first += ' ';
    first += std::to_string(static_cast<unsigned char>(all[static_cast<size_t>(i)]));
  }
  // GPL-3 opens with a centred title: 32 printable characters, shown as they are.
  const std::string text = all.substr(0, 32);
  for (char c : text) ASSERT_TRUE(c >= 0x20 && c < 0x7f && c != '\\') << "unexpected byte in the sample";
  EXPECT_THAT(info.str(), AllOf(HasSubstr("format:     hdf5"), HasSubstr("path:       " + out),
                                HasSubstr("tokens:     " + std::to_string(all.size())), HasSubstr("dtype:      uint16"),
                                HasSubstr("vocab_size: 256"), HasSubstr("tokenizer:  byte"),
                                HasSubstr("documents:  2"), HasSubstr("first 32 tokens:" + first + "\n"),
                                HasSubstr("document 0: \"" + text)));
}

TEST(DataTools, PreparedFileIsReadableByH5pyAsContiguousUint16) {
  ScratchDir dir;
  const std::string out = dir.file("gpl.h5");
  std::ostringstream log;
  prepare_dataset({.inputs = {kGpl}, .tokenizer = "byte", .out = out}, log);
  auto r = testing::run_python(dir, R"(
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    t = f["tokens"]
    assert t.dtype == np.uint16, t.dtype
    assert t.compression is None and t.chunks is None, (t.compression, t.chunks)
    assert t.id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
    raw = open(sys.argv[2], "rb").read()
    assert np.array_equal(t[()], np.frombuffer(raw, dtype=np.uint8).astype(np.uint16))
    assert int(f.attrs["vocab_size"]) == 256
    tok = f.attrs["tokenizer"]
    assert (tok.decode() if isinstance(tok, bytes) else tok) == "byte", tok
    assert list(f["doc_offsets"][()]) == [0], f["doc_offsets"][()]
    assert f["doc_offsets"].dtype == np.int64
print("ok")
)", {out, kGpl});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("ok"));
}

TEST(DataTools, PrepareRefusesBadInputsAndLeavesNoOutput) {
  ScratchDir dir;
  const std::string out = dir.file("out.h5");
  const std::string missing = dir.file("missing.txt");
  std::ostringstream log;
  EXPECT_THAT(error_of([&] { prepare_dataset({.inputs = {kGpl, missing}, .out = out}, log); }),
              AllOf(HasSubstr(missing), HasSubstr("does not exist")));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));

  const std::string empty = dir.file("empty.txt");
  testing::write_raw(empty, "");
  EXPECT_THAT(error_of([&] { prepare_dataset({.inputs = {empty}, .out = out}, log); }),
              AllOf(HasSubstr(empty), HasSubstr("empty")));
  EXPECT_THAT(error_of([&] { prepare_dataset({.inputs = {dir.path()}, .out = out}, log); }),
              AllOf(HasSubstr(dir.path()), HasSubstr("directory")));
  EXPECT_THAT(error_of([&] { prepare_dataset({.inputs = {kGpl}, .tokenizer = "gpt2", .out = out}, log); }),
              AllOf(HasSubstr("unknown tokenizer 'gpt2'"), HasSubstr("byte")));
  const std::string nodir = dir.file("no/such/dir/out.h5");
  EXPECT_THAT(error_of([&] { prepare_dataset({.inputs = {kGpl}, .out = nodir}, log); }),
              AllOf(HasSubstr(dir.file("no/such/dir")), HasSubstr("does not exist")));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  EXPECT_EQ(log.str(), "");
}

TEST(DataTools, PrepareReplacesAnOldOutputAndAStaleTempFile) {
  ScratchDir dir;
  const std::string out = dir.file("data.h5");
  const std::string a = dir.file("a.txt"), b = dir.file("b.txt");
  testing::write_raw(a, "first version\n");
  testing::write_raw(b, "second\x01\xff");
  testing::write_raw(out + ".tmp", "left over from an interrupted run");
  std::ostringstream log;
  prepare_dataset({.inputs = {a}, .out = out}, log);
  prepare_dataset({.inputs = {b, a}, .out = out}, log);
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  auto d = TokenDataset::open(out);
  const std::string want = "second\x01\xff" "first version\n";
  ASSERT_EQ(d->size(), static_cast<int64_t>(want.size()));
  std::vector<int32_t> ids(want.size());
  d->read(0, d->size(), ids.data());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(want[i]));
  EXPECT_EQ(d->doc_offsets(), (std::vector<int64_t>{0, 8}));
  std::ostringstream info;
  inspect_dataset(out, info);
  // The start of the first document only, with where it ends.
  EXPECT_THAT(info.str(), HasSubstr("document 0: \"second\\x01\\xff\" (8 of its 8 tokens, decoded by byte)"));
}

TEST(DataTools, InspectShowsBinShardsAndRejectsBadFiles) {
  ScratchDir dir;
  const std::string bin = dir.file("val_000000.bin");
  testing::write_bin(bin, {.tokens = {50256, 464, 2068, 7586}});
  std::ostringstream info;
  inspect_dataset(bin, info);
  EXPECT_THAT(info.str(), AllOf(HasSubstr("format:     llm.c .bin (version 1)"), HasSubstr("tokens:     4"),
                                HasSubstr("vocab_size: unknown"), HasSubstr("tokenizer:  unknown"),
                                HasSubstr("documents:  not recorded"), HasSubstr("first 4 tokens: 50256 464 2068 7586"),
                                Not(HasSubstr("document 0:"))));
  const std::string bad = dir.file("bad.bin");
  testing::write_bin(bad, {.tokens = {1, 2}, .magic = 7});
  EXPECT_THAT(error_of([&] { inspect_dataset(bad, info); }), AllOf(HasSubstr(bad), HasSubstr("wrong magic number 7")));
}

TEST(DataTools, CommandLineExitCodesAndMessages) {
  ScratchDir dir;
  const std::string tetra = testing::shell_quote(tetra_bin());
  const std::string out = dir.file("cli.h5");
  auto ok = testing::run_command(tetra + " data prepare --input " + kApache + " --tokenizer byte --out " + out);
  ASSERT_EQ(ok.status, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("prepared " + out));
  auto shown = testing::run_command(tetra + " data inspect " + out);
  ASSERT_EQ(shown.status, 0) << shown.output;
  EXPECT_THAT(shown.output, AllOf(HasSubstr("tokenizer:  byte"), HasSubstr("documents:  1")));

  const std::string missing = dir.file("missing.txt"), out2 = dir.file("never.h5");
  auto bad = testing::run_command(tetra + " data prepare --input " + missing + " --out " + out2);
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_THAT(bad.output, AllOf(HasSubstr("tetra: error:"), HasSubstr(missing), HasSubstr("does not exist")));
  EXPECT_FALSE(fs::exists(out2));
  EXPECT_FALSE(fs::exists(out2 + ".tmp"));

  auto nofile = testing::run_command(tetra + " data inspect " + dir.file("nothing.h5"));
  EXPECT_EQ(nofile.status, 1) << nofile.output;
  EXPECT_THAT(nofile.output, AllOf(HasSubstr("tetra: error:"), HasSubstr("nothing.h5")));
}

}  // namespace
}  // namespace tetra::data
