// The data keys of the config: data.train as a path, a glob, a list of shards or a weighted blend;
// data.val as a list without weights; data.val_fraction. Each form parses to the DataSpec it means,
// writes back through to_yaml to an equal config, and every malformed value is refused with its
// line and what would be valid.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "launch/config/config.h"
#include "launch/config/data.h"
#include "runtime/error.h"
#include "tests/launch/config/config_test_util.h"

namespace tetra::launch {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::edit;

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    Config c = parse_config(text, "cfg.yaml", overrides);
    validate(c, 2);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

Config parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  Config c = parse_config(text, "cfg.yaml", overrides);
  // The resolved config written by to_yaml reads back to an equal one (also what checkpoints store).
  EXPECT_EQ(parse_config(to_yaml(c), "again.yaml"), c) << to_yaml(c);
  return c;
}

TEST(DataConfig, EveryFormOfDataTrainParsesToItsDataSpec) {
  // A path: as before.
  Config c = parse(testing::kBase);
  data::DataSpec s = data_spec(c.data.train, "data.train");
  ASSERT_EQ(s.sources.size(), 1u);
  EXPECT_EQ(s.sources[0].paths, std::vector<std::string>{"data/x.h5"});
  EXPECT_FALSE(s.blend);
  // A glob (quoted or not).
  c = parse(edit("  train: data/x.h5", "  train: \"data/fineweb_train_*.bin\""));
  EXPECT_EQ(c.data.train, "data/fineweb_train_*.bin");
  EXPECT_EQ(data_spec(c.data.train, "data.train").sources[0].paths, std::vector<std::string>{"data/fineweb_train_*.bin"});
  // A list of shards: one dataset.
  c = parse(edit("  train: data/x.h5", "  train: [a.bin, \"dir with space/b.bin\", c_*.bin]"));
  s = data_spec(c.data.train, "data.train");
  ASSERT_EQ(s.sources.size(), 1u);
  EXPECT_EQ(s.sources[0].paths, (std::vector<std::string>{"a.bin", "dir with space/b.bin", "c_*.bin"}));
  // A blend, in flow and block style, with a list of paths in one entry.
  for (const std::string& form :
       {std::string("  train: [{path: a.h5, weight: 0.7}, {path: \"b_*.bin\", weight: 0.3}]"),
        std::string("  train:\n    - path: a.h5\n      weight: 0.7\n    - {path: \"b_*.bin\", weight: 3.0e-1}")}) {
    c = parse(edit("  train: data/x.h5", form));
    s = data_spec(c.data.train, "data.train");
    ASSERT_TRUE(s.blend) << form;
    ASSERT_EQ(s.sources.size(), 2u);
    EXPECT_EQ(s.sources[0].paths, std::vector<std::string>{"a.h5"});
    EXPECT_DOUBLE_EQ(s.sources[0].weight, 0.7);
    EXPECT_EQ(s.sources[1].paths, std::vector<std::string>{"b_*.bin"});
    EXPECT_DOUBLE_EQ(s.sources[1].weight, 0.3);
    EXPECT_EQ(c.data.train, "[{path: a.h5, weight: 0.7}, {path: \"b_*.bin\", weight: 0.3}]");
  }
  c = parse(edit("  train: data/x.h5", "  train: [{path: [a0.bin, a1.bin], weight: 2}, {path: b.h5, weight: 1}]"));
  s = data_spec(c.data.train, "data.train");
  EXPECT_EQ(s.sources[0].paths, (std::vector<std::string>{"a0.bin", "a1.bin"}));
  // From the command line too.
  c = parse(testing::kBase, {"data.train=[{path: a.h5, weight: 1}, {path: b.h5, weight: 3}]", "data.val=[v0.bin, v1.bin]"});
  EXPECT_EQ(data_spec(c.data.train, "data.train").sources.size(), 2u);
  EXPECT_EQ(data_spec(c.data.val, "data.val").sources[0].paths, (std::vector<std::string>{"v0.bin", "v1.bin"}));
  // data.val_fraction and its default.
  EXPECT_EQ(parse(testing::kBase).data.val_fraction, 0.0);
  c = parse(edit("  train: data/x.h5", "  train: data/x.h5\n  val_fraction: 0.01"));
  EXPECT_DOUBLE_EQ(c.data.val_fraction, 0.01);
}

TEST(DataConfig, MalformedDataValuesAreRefusedWithTheirLine) {
  auto with = [](const std::string& line) { return edit("  train: data/x.h5", line); };
  EXPECT_THAT(error_of(with("  train: [{path: a.h5, weight: -1}, {path: b.h5, weight: 1}]")),
              AllOf(HasSubstr("cfg.yaml:19: data.train: entry 1: weight -1 is not a positive number")));
  EXPECT_THAT(error_of(with("  train: [{path: a.h5, weight: 1}, b.h5]")),
              AllOf(HasSubstr("cfg.yaml:19"), HasSubstr("entry 2: mixes plain paths")));
  EXPECT_THAT(error_of(with("  train: [{path: a.h5, wieght: 1}]")), HasSubstr("entry 1: unknown key wieght"));
  EXPECT_THAT(error_of(with("  train: [{path: a.h5}]")), HasSubstr("entry 1: missing weight"));
  EXPECT_THAT(error_of(with("  train: [{weight: 1}]")), HasSubstr("entry 1: missing path"));
  EXPECT_THAT(error_of(with("  train: []")), HasSubstr("an empty list"));
  EXPECT_THAT(error_of(with("  train: {path: a.h5, weight: 1}")), HasSubstr("got a mapping"));
  EXPECT_THAT(error_of(with("  train: [{path: a.h5, weight: \"0.5\"}]")), HasSubstr("weight \"0.5\" is not a positive number"));
  EXPECT_THAT(error_of(with("  train: [[a.bin]]")), HasSubstr("entry 1: expected a path, got a list"));
  EXPECT_THAT(error_of(with("  train: data/x.h5\n  val: [{path: v.h5, weight: 1}]")),
              AllOf(HasSubstr("cfg.yaml:20: data.val"), HasSubstr("cannot be a weighted blend")));
  EXPECT_THAT(error_of(with("  train: data/x.h5\n  val: v.h5\n  val_fraction: 0.1")),
              AllOf(HasSubstr("data.val_fraction"), HasSubstr("set one of them")));
  EXPECT_THAT(error_of(with("  train: data/x.h5\n  val_fraction: 1")), HasSubstr("data.val_fraction"));
  // Without a validation source, evaluation has nothing to read; val_fraction is one.
  const std::string eval = edit("  micro_batch: 2", "  micro_batch: 2\n  eval_every: 10");
  EXPECT_THAT(error_of(eval), HasSubstr("data.val is not set"));
  EXPECT_NO_THROW(validate(parse_config(edit("  train: data/x.h5", "  train: data/x.h5\n  val_fraction: 0.05", eval),
                                        "cfg.yaml"), 2));
}

TEST(DataConfig, TrainingChecksThatEveryShardExistsAndEveryGlobMatches) {
  testing::TempDir dir;
  const std::string a = dir.write("a.bin", "x"), b = dir.write("b_0.bin", "x");
  Config c = parse_config(testing::kBase, "cfg.yaml",
                          {"data.train=[{path: " + a + ", weight: 1}, {path: \"" + dir.path() + "/b_*.bin\", weight: 2}]"});
  EXPECT_NO_THROW(validate_for_training(c));
  c = parse_config(testing::kBase, "cfg.yaml", {"data.train=[" + a + ", " + dir.path() + "/missing.bin]"});
  try {
    validate_for_training(c);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("--set data.train: " + dir.path() + "/missing.bin does not exist")));
  }
  c = parse_config(testing::kBase, "cfg.yaml", {"data.train=" + a, "data.val=" + dir.path() + "/v_*.bin"});
  try {
    validate_for_training(c);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("--set data.val: no file matches " + dir.path() + "/v_*.bin")));
  }
}

}  // namespace
}  // namespace tetra::launch
