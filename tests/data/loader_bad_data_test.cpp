// Bad data is refused with an error that names the file, before training (when the loader opens
// its files) — missing files, globs that match nothing, wrong magic, truncated files, vocabularies
// larger than the model's, datasets shorter than one window — or, for a token id outside the
// vocabulary, when its window is read, with the file and the token offset.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "loader_test_util.h"

namespace tetra::data::loadertest {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::error_of;

DataLoaderOptions options(const std::vector<std::string>& paths, int64_t T = 8) {
  DataLoaderOptions o;
  o.train.sources.push_back({paths, 1.0});
  o.sampler = {.seq_len = T, .global_batch = 2, .micro_batch = 1, .dp_rank = 0, .dp_size = 1};
  o.model_vocab = 1000;
  return o;
}

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::Internal;
}

TEST(LoaderBadData, EveryBadFileIsNamedBeforeTraining) {
  ScratchDir dir;
  const TokenFile good = make_file(dir, "good.bin", Kind::Bin, 8 * 10 + 1, 1);
  auto open = [&](const std::vector<std::string>& paths) { return [paths] { DataLoader l(options(paths)); }; };

  // Missing file, also as one shard of several.
  const std::string missing = dir.file("missing.bin");
  EXPECT_THAT(error_of(open({good.path, missing})), AllOf(HasSubstr(missing), HasSubstr("does not exist")));
  // A glob that matches nothing.
  const std::string pattern = dir.file("train_*.bin");
  EXPECT_THAT(error_of(open({pattern})), AllOf(HasSubstr("no file matches"), HasSubstr(pattern)));
  // Wrong magic.
  const std::string magic = dir.file("magic.bin");
  testing::write_bin(magic, {.tokens = std::vector<uint16_t>(100, 1), .magic = 12345});
  EXPECT_THAT(error_of(open({good.path, magic})), AllOf(HasSubstr(magic), HasSubstr("wrong magic number 12345")));
  // Truncated llm.c shard: the header promises more tokens than the file holds.
  const std::string cut = dir.file("cut.bin");
  testing::write_bin(cut, {.tokens = std::vector<uint16_t>(100, 1), .count = 200});
  EXPECT_THAT(error_of(open({cut})), AllOf(HasSubstr(cut), HasSubstr("truncated")));
  // Truncated HDF5: the header is intact but the raw tokens stop short.
  const TokenFile h5 = make_file(dir, "cut.h5", Kind::H5U16, 5000, 2);
  {
    std::string bytes = testing::read_raw(h5.path);
    testing::write_raw(h5.path, bytes.substr(0, bytes.size() - 3000));
  }
  EXPECT_THAT(error_of(open({h5.path})), AllOf(HasSubstr(h5.path), HasSubstr("truncated")));
  // Shorter than one window (8 tokens; a window of T = 8 needs 9), alone or as one shard of several.
  const TokenFile tiny = make_file(dir, "tiny.bin", Kind::Bin, 8, 3);
  EXPECT_THAT(error_of(open({tiny.path})),
              AllOf(HasSubstr(tiny.path), HasSubstr("shorter than one window"), HasSubstr("8 tokens"), HasSubstr("needs 9")));
  EXPECT_THAT(error_of(open({good.path, tiny.path})), AllOf(HasSubstr(tiny.path), HasSubstr("shorter than one window")));
  // A dataset made for a larger vocabulary than the model's.
  testing::H5Spec big;
  big.tokens = std::vector<uint64_t>(100, 5);
  big.vocab_size = 50257;
  const std::string bigv = dir.file("bigvocab.h5");
  testing::write_h5(bigv, big);
  EXPECT_THAT(error_of(open({bigv})), AllOf(HasSubstr(bigv), HasSubstr("vocab_size 50257"), HasSubstr("1000")));
  // Not a token file at all, and a directory.
  const std::string text = dir.file("notes.bin");
  testing::write_raw(text, "hello, this is not a token shard at all; just some text that is long enough");
  EXPECT_THAT(error_of(open({text})), AllOf(HasSubstr(text), HasSubstr("magic")));
  EXPECT_THAT(error_of(open({dir.path()})), AllOf(HasSubstr(dir.path()), HasSubstr("directory")));
  // The same shard twice.
  EXPECT_THAT(error_of(open({good.path, dir.file("good*.bin")})), AllOf(HasSubstr(good.path), HasSubstr("twice")));
  // These are data errors (exit code 1), not internal ones.
  EXPECT_EQ(kind_of(open({magic})), ErrorKind::Data);
  EXPECT_EQ(kind_of(open({tiny.path})), ErrorKind::Data);
}

TEST(LoaderBadData, TokenIdsOutsideTheVocabularyNameFileAndOffsetWhenRead) {
  ScratchDir dir;
  const int64_t T = 8;
  // .bin (no vocabulary in the file: the model's 1000 is the limit) and HDF5 in every layout.
  std::vector<uint16_t> toks(T * 6 + 1, 7);
  toks[3 * T + 5] = 1000;  // window 3, position 5
  const std::string bin = dir.file("bad.bin");
  testing::write_bin(bin, {.tokens = toks});
  for (bool chunked : {false, true}) {
    testing::H5Spec spec;
    spec.tokens.assign(T * 6 + 1, 7);
    spec.tokens[3 * T + 5] = 999;  // the file says vocab_size 999: id 999 is out
    spec.vocab_size = 999;
    spec.chunked_gzip = chunked;
    testing::write_h5(dir.file(chunked ? "bad_gz.h5" : "bad.h5"), spec);
  }
  for (const std::string& path : {bin, dir.file("bad.h5"), dir.file("bad_gz.h5")})
    for (int prefetch : {0, 3}) {
      DataLoaderOptions o = options({path}, T);
      o.prefetch = prefetch;
      DataLoader loader(o);
      loader.start(0);
      for (int64_t step = 0; step < 3; ++step) loader.batch(step / 2, static_cast<int>(step % 2));  // windows 0..2
      const std::string e = error_of([&] { loader.batch(1, 1); });  // window 3
      EXPECT_THAT(e, AllOf(HasSubstr(path), HasSubstr("token offset " + std::to_string(3 * T + 5)),
                           HasSubstr("outside the vocabulary")))
          << path;
      EXPECT_THAT(e, HasSubstr(path == bin ? "token id 1000" : "token id 999"));
      EXPECT_THAT(e, HasSubstr(path == bin ? "model vocab_size 1000" : "dataset vocab_size 999"));
    }
  // An id that does not fit in int32 (uint32 file without a vocabulary and no model vocabulary).
  testing::H5Spec huge;
  huge.file_type = H5T_STD_U32LE;
  huge.tokens.assign(T * 2 + 1, 3);
  huge.tokens[4] = 3000000000u;
  const std::string hpath = dir.file("huge.h5");
  testing::write_h5(hpath, huge);
  DataLoaderOptions o = options({hpath}, T);
  o.model_vocab = 0;
  DataLoader loader(o);
  EXPECT_THAT(error_of([&] { loader.batch(0, 0); }),
              AllOf(HasSubstr(hpath), HasSubstr("token id 3000000000"), HasSubstr("offset 4"), HasSubstr("int32")));
}

TEST(LoaderBadData, BadSetupsAreExplained) {
  ScratchDir dir;
  const TokenFile a = make_file(dir, "a.bin", Kind::Bin, 8 * 10 + 1, 1);
  const TokenFile v = make_file(dir, "v.bin", Kind::Bin, 8 * 3 + 1, 2);  // 3 windows
  DataLoaderOptions o = options({a.path});
  o.sampler.global_batch = 4;
  o.val.sources.push_back({{v.path}, 1.0});
  o.val.key = "data.val";
  EXPECT_THAT(error_of([&] { DataLoader l(o); }),
              AllOf(HasSubstr("data.val"), HasSubstr("3 windows"), HasSubstr("fewer than one global batch of 4")));
  DataLoaderOptions both = options({a.path});
  both.val.sources.push_back({{v.path}, 1.0});
  both.val_fraction = 0.1;
  EXPECT_THAT(error_of([&] { DataLoader l(both); }), HasSubstr("both set"));
  DataLoaderOptions all_held = options({a.path});
  all_held.val_fraction = 0.95;
  EXPECT_THAT(error_of([&] { DataLoader l(all_held); }), HasSubstr("leaves no window to train on"));
  DataLoaderOptions gds = options({a.path});
  gds.io = "gds";
  EXPECT_THAT(error_of([&] { DataLoader l(gds); }), HasSubstr("on the CPU"));
}

}  // namespace
}  // namespace tetra::data::loadertest
