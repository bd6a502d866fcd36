// TokenDataset: both formats read back exactly what was written; every malformed file fails with
// a message that names the file and the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "data/llmc_bin_dataset.h"
#include "data/token_dataset.h"
#include "data_fixtures.h"
#include "runtime/error.h"

namespace tetra::data {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::BinSpec;
using testing::error_of;
using testing::H5Spec;
using testing::ScratchDir;

std::vector<uint16_t> pattern_u16(int n) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<uint16_t>((i * 7919 + 13) % 50257);
  return v;
}

std::vector<int32_t> read_all(TokenDataset& d) {
  std::vector<int32_t> out(static_cast<size_t>(d.size()), -1);
  d.read(0, d.size(), out.data());
  return out;
}

TEST(DataTokenDataset, BinReadsBackExactly) {
  ScratchDir dir;
  auto tokens = pattern_u16(1000);
  tokens[3] = 65535;  // the top of the uint16 range survives
  const std::string path = dir.file("shard_000.bin");
  testing::write_bin(path, {.tokens = tokens});
  auto d = TokenDataset::open(path);
  EXPECT_EQ(d->format(), "llm.c .bin (version 1)");
  EXPECT_EQ(d->path(), path);
  EXPECT_EQ(d->size(), 1000);
  EXPECT_EQ(d->vocab_size(), 0);
  EXPECT_EQ(d->tokenizer(), "");
  EXPECT_EQ(d->token_dtype(), DType::U16);
  EXPECT_EQ(d->contiguous_offset(), 1024);
  EXPECT_EQ(d->num_documents(), 0);
  std::vector<int32_t> all = read_all(*d);
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(all[i], tokens[i]) << "token " << i;
  // A read in the middle returns just that range.
  std::vector<int32_t> part(10, -1);
  d->read(495, 10, part.data());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(part[static_cast<size_t>(i)], tokens[static_cast<size_t>(495 + i)]);
}

TEST(DataTokenDataset, Hdf5Uint16ReadsBackExactlyWithAttributes) {
  ScratchDir dir;
  H5Spec spec;
  for (int i = 0; i < 777; ++i) spec.tokens.push_back(static_cast<uint64_t>((i * 31 + 5) % 65536));
  spec.tokens[10] = 65535;
  spec.vocab_size = 65536;
  spec.tokenizer = "gpt2";
  spec.doc_offsets = std::vector<int64_t>{0, 100, 500};
  const std::string path = dir.file("tokens.h5");
  testing::write_h5(path, spec);

  auto d = TokenDataset::open(path);
  EXPECT_EQ(d->format(), "hdf5");
  EXPECT_EQ(d->size(), 777);
  EXPECT_EQ(d->vocab_size(), 65536);
  EXPECT_EQ(d->tokenizer(), "gpt2");
  EXPECT_EQ(d->token_dtype(), DType::U16);
  EXPECT_EQ(d->num_documents(), 3);
  EXPECT_EQ(d->doc_offsets(), (std::vector<int64_t>{0, 100, 500}));
  std::vector<int32_t> all = read_all(*d);
  for (size_t i = 0; i < spec.tokens.size(); ++i) ASSERT_EQ(all[i], static_cast<int32_t>(spec.tokens[i]));
  std::vector<int32_t> part(3, -1);
  d->read(774, 3, part.data());
  EXPECT_EQ(part, (std::vector<int32_t>{all[774], all[775], all[776]}));
}

TEST(DataTokenDataset, Hdf5ContiguousOffsetPointsAtTheRawTokens) {
  ScratchDir dir;
  H5Spec spec;
  for (int i = 0; i < 300; ++i) spec.tokens.push_back(static_cast<uint64_t>(1000 + 3 * i));
  spec.vocab_size = 2000;
  const std::string path = dir.file("raw.h5");
  testing::write_h5(path, spec);
  auto d = TokenDataset::open(path);
  ASSERT_GE(d->contiguous_offset(), 0);
  // The bytes at that offset are the tokens, little-endian uint16: what a direct reader would load.
  const std::string bytes = testing::read_raw(path);
  ASSERT_LE(static_cast<size_t>(d->contiguous_offset()) + 600, bytes.size());
  for (int i = 0; i < 300; ++i) {
    uint16_t v;
    std::memcpy(&v, bytes.data() + d->contiguous_offset() + 2 * i, 2);
    ASSERT_EQ(v, spec.tokens[static_cast<size_t>(i)]) << "token " << i;
  }
}

TEST(DataTokenDataset, Hdf5Uint32ChunkedCompressedAndBigEndianRead) {
  ScratchDir dir;
  H5Spec spec;
  for (int i = 0; i < 100; ++i) spec.tokens.push_back(static_cast<uint64_t>(100000 + 977 * i));
  spec.file_type = H5T_STD_U32LE;
  spec.chunked_gzip = true;
  spec.vocab_size = 200000;
  const std::string p32 = dir.file("u32.h5");
  testing::write_h5(p32, spec);
  auto d = TokenDataset::open(p32);
  EXPECT_EQ(d->token_dtype(), DType::U32);
  EXPECT_EQ(d->contiguous_offset(), -1);  // compressed: no raw offset
  std::vector<int32_t> part(20, -1);
  d->read(50, 20, part.data());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(part[static_cast<size_t>(i)], 100000 + 977 * (50 + i));

  H5Spec be;
  be.tokens = {1, 2, 258, 65535, 7};
  be.file_type = H5T_STD_U16BE;
  const std::string pbe = dir.file("be.h5");
  testing::write_h5(pbe, be);
  auto dbe = TokenDataset::open(pbe);
  EXPECT_EQ(dbe->contiguous_offset(), -1);  // not little-endian on disk
  EXPECT_EQ(dbe->vocab_size(), 0);          // no attribute: unknown
  EXPECT_EQ(read_all(*dbe), (std::vector<int32_t>{1, 2, 258, 65535, 7}));
}

TEST(DataTokenDataset, Hdf5WrittenByH5pyIsRead) {
  ScratchDir dir;
  const std::string path = dir.file("py.h5");
  auto r = testing::run_python(dir, R"(
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("tokens", data=(np.arange(5000, dtype=np.int64) * 37 % 50257).astype(np.uint16))
    f.create_dataset("doc_offsets", data=np.array([0, 1234, 4000], dtype=np.int64))
    f.attrs["vocab_size"] = 50257
    f.attrs["tokenizer"] = "gpt2"
)", {path});
  ASSERT_EQ(r.status, 0) << r.output;
  auto d = TokenDataset::open(path);
  EXPECT_EQ(d->size(), 5000);
  EXPECT_EQ(d->vocab_size(), 50257);
  EXPECT_EQ(d->tokenizer(), "gpt2");  // a variable-length UTF-8 string attribute
  EXPECT_EQ(d->doc_offsets(), (std::vector<int64_t>{0, 1234, 4000}));
  std::vector<int32_t> all = read_all(*d);
  for (int64_t i = 0; i < 5000; ++i) ASSERT_EQ(all[static_cast<size_t>(i)], i * 37 % 50257);
}

TEST(DataTokenDataset, MissingUnreadableOrForeignFilesAreRejected) {
  ScratchDir dir;
  const std::string missing = dir.file("nope.h5");
  EXPECT_THAT(error_of([&] { TokenDataset::open(missing); }), AllOf(HasSubstr(missing), HasSubstr("does not exist")));
  EXPECT_THAT(error_of([&] { TokenDataset::open(dir.path()); }), AllOf(HasSubstr(dir.path()), HasSubstr("directory")));

  const std::string empty = dir.file("empty.h5");
  testing::write_raw(empty, "");
  EXPECT_THAT(error_of([&] { TokenDataset::open(empty); }),
              AllOf(HasSubstr(empty), HasSubstr("neither an HDF5 file, an llm.c .bin"), HasSubstr("empty")));

  const std::string text = dir.file("notes.txt");
  testing::write_raw(text, "just some text, not tokens\n");
  EXPECT_THAT(error_of([&] { TokenDataset::open(text); }),
              AllOf(HasSubstr(text), HasSubstr("neither an HDF5 file, an llm.c .bin")));

  if (::geteuid() != 0) {  // root reads files whatever their mode
    const std::string locked = dir.file("locked.bin");
    testing::write_bin(locked, {.tokens = {1, 2, 3}});
    std::filesystem::permissions(locked, std::filesystem::perms::none);
    EXPECT_THAT(error_of([&] { TokenDataset::open(locked); }), AllOf(HasSubstr(locked), HasSubstr("cannot open")));
  }
}

TEST(DataTokenDataset, BadBinFilesAreRejected) {
  ScratchDir dir;
  const auto tokens = pattern_u16(64);

  const std::string magic = dir.file("magic.bin");
  testing::write_bin(magic, {.tokens = tokens, .magic = 20240326});  // llm.c's model-file magic
  EXPECT_THAT(error_of([&] { TokenDataset::open(magic); }),
              AllOf(HasSubstr(magic), HasSubstr("wrong magic number 20240326"), HasSubstr("20240520")));

  const std::string version = dir.file("version.bin");
  testing::write_bin(version, {.tokens = tokens, .version = 2});
  EXPECT_THAT(error_of([&] { TokenDataset::open(version); }), AllOf(HasSubstr(version), HasSubstr("version 2")));

  const std::string truncated = dir.file("truncated.bin");
  testing::write_bin(truncated, {.tokens = tokens, .count = 100});
  EXPECT_THAT(error_of([&] { TokenDataset::open(truncated); }),
              AllOf(HasSubstr(truncated), HasSubstr("truncated"), HasSubstr("100 tokens"), HasSubstr("64 tokens")));

  const std::string short_header = dir.file("short_header.bin");
  testing::write_bin(short_header, {.tokens = {}, .header_bytes = 100});
  EXPECT_THAT(error_of([&] { TokenDataset::open(short_header); }),
              AllOf(HasSubstr(short_header), HasSubstr("truncated"), HasSubstr("1024-byte header")));

  const std::string trailing = dir.file("trailing.bin");
  testing::write_bin(trailing, {.tokens = tokens, .extra_bytes = 6});
  EXPECT_THAT(error_of([&] { TokenDataset::open(trailing); }),
              AllOf(HasSubstr(trailing), HasSubstr("6 bytes after the 64 tokens")));

  const std::string zero = dir.file("zero.bin");
  testing::write_bin(zero, {.tokens = {}, .count = 0});
  EXPECT_THAT(error_of([&] { TokenDataset::open(zero); }), AllOf(HasSubstr(zero), HasSubstr("token count 0")));
}

TEST(DataTokenDataset, BadHdf5FilesAreRejected) {
  ScratchDir dir;
  auto expect_open_error = [&](const std::string& name, const H5Spec& spec, std::vector<std::string> parts) {
    const std::string path = dir.file(name);
    testing::write_h5(path, spec);
    std::string msg = error_of([&] { TokenDataset::open(path); });
    EXPECT_THAT(msg, HasSubstr(path)) << name;
    for (const std::string& p : parts) EXPECT_THAT(msg, HasSubstr(p)) << name;
  };
  expect_open_error("no_tokens.h5", {.vocab_size = 256, .omit_tokens = true}, {"no /tokens dataset"});
  expect_open_error("group.h5", {.tokens_as_group = true}, {"/tokens", "not a dataset"});
  expect_open_error("float.h5", {.tokens = {1, 2, 3}, .file_type = H5T_IEEE_F32LE}, {"dtype float32", "uint16"});
  expect_open_error("signed.h5", {.tokens = {1, 2, 3}, .file_type = H5T_STD_I32LE}, {"dtype int32"});
  expect_open_error("u64.h5", {.tokens = {1, 2, 3}, .file_type = H5T_STD_U64LE}, {"dtype uint64"});
  expect_open_error("rank2.h5", {.tokens = std::vector<uint64_t>(20, 1), .dims = {4, 5}}, {"rank 2", "[4, 5]"});
  expect_open_error("empty_tokens.h5", {.tokens = {}}, {"empty"});
  expect_open_error("vocab_too_big.h5", {.tokens = {1, 2}, .vocab_size = 70000}, {"vocab_size 70000", "uint16"});
  expect_open_error("vocab_zero.h5", {.tokens = {1, 2}, .vocab_size = 0}, {"vocab_size", "positive"});

  // A truncated HDF5 file: the signature is there but the rest is missing; HDF5's reason is kept.
  const std::string good = dir.file("good.h5");
  testing::write_h5(good, {.tokens = std::vector<uint64_t>(4000, 9), .vocab_size = 256});
  const std::string cut = dir.file("cut.h5");
  testing::write_raw(cut, testing::read_raw(good).substr(0, 200));
  EXPECT_THAT(error_of([&] { TokenDataset::open(cut); }), AllOf(HasSubstr(cut), HasSubstr("cannot open it as a token dataset"), HasSubstr("truncated file")));

  // Broken doc offsets are found when they are read.
  const std::string docs = dir.file("docs.h5");
  testing::write_h5(docs, {.tokens = std::vector<uint64_t>(10, 1), .doc_offsets = std::vector<int64_t>{0, 6, 3}});
  auto d = TokenDataset::open(docs);
  EXPECT_THAT(error_of([&] { d->doc_offsets(); }),
              AllOf(HasSubstr(docs), HasSubstr("/doc_offsets"), HasSubstr("entry 2")));
}

TEST(DataTokenDataset, ReadPastTheEndIsAnError) {
  ScratchDir dir;
  const std::string bin = dir.file("a.bin");
  testing::write_bin(bin, {.tokens = pattern_u16(50)});
  const std::string h5 = dir.file("a.h5");
  testing::write_h5(h5, {.tokens = std::vector<uint64_t>(50, 3), .vocab_size = 256});
  for (const std::string& path : {bin, h5}) {
    auto d = TokenDataset::open(path);
    std::vector<int32_t> buf(64);
    EXPECT_THAT(error_of([&] { d->read(45, 6, buf.data()); }),
                AllOf(HasSubstr(path), HasSubstr("[45, 51)"), HasSubstr("past the end"), HasSubstr("50 tokens")));
    EXPECT_THAT(error_of([&] { d->read(-1, 2, buf.data()); }), HasSubstr("past the end"));
    d->read(45, 5, buf.data());  // exactly up to the end is fine
    d->read(50, 0, buf.data());
  }
}

TEST(DataTokenDataset, TokenIdsAreValidatedAgainstTheVocabulary) {
  ScratchDir dir;
  // HDF5 with vocab_size 256 but an id 300 at offset 37: the file's own attribute catches it.
  std::vector<uint64_t> ids(100, 65);
  ids[37] = 300;
  ids[60] = 999;
  const std::string h5 = dir.file("bad_ids.h5");
  testing::write_h5(h5, {.tokens = ids, .vocab_size = 256, .tokenizer = "byte"});
  auto d = TokenDataset::open(h5);
  std::vector<int32_t> buf(100);
  d->read(0, 37, buf.data());  // before the bad id: fine
  EXPECT_THAT(error_of([&] { d->read(30, 20, buf.data()); }),
              AllOf(HasSubstr(h5), HasSubstr("token id 300"), HasSubstr("offset 37"), HasSubstr("vocab_size 256")));

  // A model with a smaller vocabulary than the file was made for is refused at open time.
  EXPECT_THAT(error_of([&] { d->check_vocab(128); }),
              AllOf(HasSubstr(h5), HasSubstr("vocab_size 256"), HasSubstr("model's vocab_size is 128")));
  d->check_vocab(50304);  // a larger (padded) model vocabulary is fine; the file's 256 stays the limit
  EXPECT_EQ(d->id_limit(), 256);

  // .bin: no vocabulary in the file, so the model's is the limit once declared.
  auto toks = pattern_u16(200);
  toks[123] = 50300;
  const std::string bin = dir.file("bad_ids.bin");
  testing::write_bin(bin, {.tokens = toks});
  auto b = TokenDataset::open(bin);
  std::vector<int32_t> all(200);
  b->read(0, 200, all.data());  // no model declared: any uint16 is accepted
  EXPECT_EQ(all[123], 50300);
  b->check_vocab(50257);
  EXPECT_EQ(b->id_limit(), 50257);
  EXPECT_THAT(error_of([&] { b->read(100, 50, all.data()); }),
              AllOf(HasSubstr(bin), HasSubstr("token id 50300"), HasSubstr("offset 123"),
                    HasSubstr("model vocab_size 50257")));

  // uint32 ids that do not fit in int32 are refused even with no vocabulary at all.
  const std::string big = dir.file("big_ids.h5");
  testing::write_h5(big, {.tokens = {5, 6, (uint64_t{1} << 31) + 5}, .file_type = H5T_STD_U32LE});
  auto g = TokenDataset::open(big);
  EXPECT_THAT(error_of([&] { g->read(0, 3, all.data()); }),
              AllOf(HasSubstr(big), HasSubstr("token id 2147483653"), HasSubstr("offset 2"), HasSubstr("int32")));
}

}  // namespace
}  // namespace tetra::data
