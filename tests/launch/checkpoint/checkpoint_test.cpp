// Checkpoint pieces without MPI: the CRC-32, directory names and listing, meta.json, shard files
// read back through CheckpointReader at other splits (resharding), integrity checks, the
// consolidated round trip (`tetra ckpt consolidate` → model.init_from's loader), fault plans and
// exit codes. The multi-rank behaviour is covered by the script tests beside this file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "launch/checkpoint/checksum.h"
#include "launch/checkpoint/files.h"
#include "launch/checkpoint/meta.h"
#include "launch/checkpoint/reader.h"
#include "launch/checkpoint/shard.h"
#include "launch/cli/commands.h"
#include "launch/config/config.h"
#include "launch/job/fault_injection.h"
#include "launch/job/signals.h"
#include "launch/train/trainer.h"
#include "models/consolidated.h"
#include "launch/config/model.h"
#include "parallel/param_set.h"

namespace tetra::launch {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("tetra_ckpt_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

struct Cleanup {
  ~Cleanup() { fs::remove_all(fs::temp_directory_path() / ("tetra_ckpt_test_" + std::to_string(::getpid()))); }
} cleanup;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- CRC-32 -------------------------------------------------------------------------------------

TEST(Crc32, KnownVectors) {
  EXPECT_EQ(crc32_update(0, "", 0), 0u);
  EXPECT_EQ(crc32_update(0, "123456789", 9), 0xCBF43926u);  // the CRC-32 check value
  const std::string fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(crc32_update(0, fox.data(), fox.size()), 0x414FA339u);
  EXPECT_EQ(crc32_hex(0x414FA339u), "414fa339");
}

TEST(Crc32, PiecewiseEqualsWhole) {
  std::mt19937 gen(7);
  std::vector<unsigned char> data(100003);
  for (auto& b : data) b = static_cast<unsigned char>(gen());
  const uint32_t whole = crc32_update(0, data.data(), data.size());
  for (size_t split : {size_t{1}, size_t{7}, size_t{8}, size_t{4096}, size_t{99999}}) {
    uint32_t c = crc32_update(0, data.data(), split);
    c = crc32_update(c, data.data() + split, data.size() - split);
    EXPECT_EQ(c, whole) << "split at " << split;
  }
  const std::string path = fresh_dir("crc") + "/blob";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), data.size());
  FileDigest d = digest_file(path);
  EXPECT_EQ(d.bytes, data.size());
  EXPECT_EQ(d.crc32, whole);
  EXPECT_NE(error_of([&] { digest_file(path + ".missing"); }).find("cannot open"), std::string::npos);
}

// ---- names and listing --------------------------------------------------------------------------

TEST(CheckpointFiles, Names) {
  EXPECT_EQ(step_dir_name(12), "step_12");
  EXPECT_EQ(rank_file_name(3), "rank_00003.h5");
  EXPECT_EQ(parse_step_dir("step_12"), 12);
  EXPECT_EQ(parse_step_dir("step_0"), 0);
  EXPECT_FALSE(parse_step_dir("step_12.tmp"));
  EXPECT_FALSE(parse_step_dir("step_"));
  EXPECT_FALSE(parse_step_dir("step_1x"));
  EXPECT_FALSE(parse_step_dir("step_-1"));
  EXPECT_FALSE(parse_step_dir("step_4.discarded"));
  EXPECT_EQ(parse_tmp_step_dir("step_12.tmp"), 12);
  EXPECT_FALSE(parse_tmp_step_dir("step_12"));
}

TEST(CheckpointFiles, ListsNewestFirstWithoutTmp) {
  const std::string dir = fresh_dir("list");
  for (const char* d : {"step_2", "step_10", "step_3.tmp", "step_7", "step_9.discarded", "other"})
    fs::create_directories(fs::path(dir) / d);
  std::ofstream(fs::path(dir) / "step_2" / kMetaFile) << "{}";
  std::ofstream(fs::path(dir) / "step_10" / kMetaFile) << "{}";
  std::ofstream(fs::path(dir) / "step_11");  // a file, not a directory
  auto list = list_checkpoint_dirs(dir);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].step, 10);
  EXPECT_TRUE(list[0].has_meta);
  EXPECT_EQ(list[1].step, 7);
  EXPECT_FALSE(list[1].has_meta);
  EXPECT_EQ(list[2].step, 2);
  EXPECT_TRUE(list_checkpoint_dirs(dir + "/absent").empty());
}

TEST(CheckpointFiles, DurableWriteReplacesWhole) {
  const std::string path = fresh_dir("durable") + "/meta.json";
  write_file_durably(path, "first");
  write_file_durably(path, "second");
  EXPECT_EQ(read_text_file(path), "second");
  EXPECT_FALSE(fs::exists(path + ".part"));
  EXPECT_NE(error_of([&] { write_file_durably("/nonexistent_dir_tetra/x", "y"); }).find("cannot create"),
            std::string::npos);
}

// ---- shards, meta.json, the reader --------------------------------------------------------------

// A parameter's full fp32 state with recognisable values: master = base + i, moments derived.
struct FullParam {
  std::string name;
  Shape shape;
  std::vector<float> master, m, v;
};

FullParam make_param(const std::string& name, Shape shape, float base) {
  FullParam p{name, shape, {}, {}, {}};
  const int64_t n = shape_numel(shape);
  for (int64_t i = 0; i < n; ++i) {
    p.master.push_back(base + static_cast<float>(i) * 0.5f);
    p.m.push_back(-base - static_cast<float>(i));
    p.v.push_back(base * 0.25f + static_cast<float>(i * i));
  }
  return p;
}

StatePiece host_piece(const FullParam& p, int64_t begin, int64_t end) {
  StatePiece s;
  s.name = p.name;
  s.full_shape = p.shape;
  s.begin = begin;
  s.end = end;
  auto slice = [&](const std::vector<float>& v) {
    return Tensor::from_vector(std::vector<float>(v.begin() + begin, v.begin() + end), {end - begin});
  };
  s.master = slice(p.master);
  s.exp_avg = slice(p.m);
  s.exp_avg_sq = slice(p.v);
  return s;
}

// Writes a checkpoint whose rank files hold `layout[r]` = (param index, begin, end) pieces.
std::string write_checkpoint(const std::string& dir, const std::vector<FullParam>& params,
                             const std::vector<std::vector<std::tuple<int, int64_t, int64_t>>>& layout,
                             const std::string& config_yaml = "") {
  fs::create_directories(dir);
  CheckpointMeta meta;
  meta.step = 42;
  meta.tokens_seen = 4200;
  meta.optimizer_steps = 41;
  meta.skipped_steps = 1;
  meta.world_size = static_cast<int>(layout.size());
  meta.dp = meta.world_size;
  meta.config_yaml = config_yaml;
  for (const FullParam& p : params) meta.params.push_back({p.name, p.shape});
  for (size_t r = 0; r < layout.size(); ++r) {
    std::vector<StatePiece> pieces;
    RankFileInfo info;
    info.file = rank_file_name(static_cast<int>(r));
    info.rank = static_cast<int>(r);
    for (auto [i, b, e] : layout[r]) {
      pieces.push_back(host_piece(params[static_cast<size_t>(i)], b, e));
      info.pieces.push_back({params[static_cast<size_t>(i)].name, b, e});
    }
    ShardHeader h;
    h.step = meta.step;
    h.rank = static_cast<int>(r);
    h.world_size = meta.world_size;
    const std::string path = dir + "/" + info.file;
    write_shard(path, h, pieces);
    FileDigest d = digest_file(path);
    info.bytes = d.bytes;
    info.crc32 = d.crc32;
    meta.files.push_back(info);
  }
  write_file_durably(dir + "/" + kMetaFile, to_json(meta).dump(1));
  return dir;
}

std::vector<FullParam> two_params() { return {make_param("a.weight", {4, 6}, 1.0f), make_param("b.bias", {10}, 100.0f)}; }

TEST(CheckpointReader, ReadsAnySplitFromAnyFiles) {
  auto params = two_params();
  // Irregular pieces over three files, one file empty (a rank that owns nothing).
  const std::string dir = write_checkpoint(fresh_dir("reshard") + "/step_42", params,
                                           {{{0, 0, 5}, {1, 6, 10}}, {{0, 5, 24}, {1, 0, 6}}, {}});
  CheckpointReader reader(dir);
  EXPECT_EQ(reader.meta().step, 42);
  EXPECT_EQ(reader.meta().optimizer_steps, 41);
  EXPECT_EQ(reader.verify(), "");
  // Reading back at other splits: ranges that cross file boundaries, and whole parameters.
  for (auto [i, b, e] : std::vector<std::tuple<int, int64_t, int64_t>>{{0, 3, 17}, {0, 0, 24}, {1, 2, 9}, {1, 5, 6}}) {
    const FullParam& p = params[static_cast<size_t>(i)];
    StatePiece s;
    s.name = p.name;
    s.full_shape = p.shape;
    s.begin = b;
    s.end = e;
    s.master = Tensor::zeros({e - b}, DType::F32);
    s.exp_avg = Tensor::zeros({e - b}, DType::F32);
    s.exp_avg_sq = Tensor::zeros({e - b}, DType::F32);
    reader.fill(s);
    for (int64_t k = b; k < e; ++k) {
      EXPECT_EQ(s.master.data<float>()[k - b], p.master[static_cast<size_t>(k)]) << p.name << "[" << k << "]";
      EXPECT_EQ(s.exp_avg.data<float>()[k - b], p.m[static_cast<size_t>(k)]) << p.name << "[" << k << "]";
      EXPECT_EQ(s.exp_avg_sq.data<float>()[k - b], p.v[static_cast<size_t>(k)]) << p.name << "[" << k << "]";
    }
  }
  Tensor full = reader.full_master("a.weight", {4, 6});
  for (int64_t k = 0; k < 24; ++k) EXPECT_EQ(full.data<float>()[k], params[0].master[static_cast<size_t>(k)]);

  // A piece of another model: unknown name, or another shape.
  StatePiece other;
  other.name = "c.weight";
  other.full_shape = {3};
  other.end = 3;
  EXPECT_NE(error_of([&] { reader.fill(other); }).find("has no parameter 'c.weight'"), std::string::npos);
  other.name = "b.bias";
  other.full_shape = {11};
  EXPECT_NE(error_of([&] { reader.fill(other); }).find("has shape [10] but the model needs [11]"), std::string::npos);
}

TEST(CheckpointReader, VerifyFindsDamage) {
  auto params = two_params();
  const std::string dir =
      write_checkpoint(fresh_dir("damage") + "/step_42", params, {{{0, 0, 24}}, {{1, 0, 10}}});
  CheckpointReader reader(dir);
  ASSERT_EQ(reader.verify(), "");
  {  // one flipped bit in rank 1's file
    std::fstream f(dir + "/rank_00001.h5", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(800);
    char c = 0;
    f.read(&c, 1);
    f.seekp(800);
    c ^= 1;
    f.write(&c, 1);
  }
  EXPECT_EQ(reader.verify(0, 2), "");  // rank 0's share of the files is intact
  EXPECT_NE(reader.verify(1, 2).find("rank_00001.h5: CRC-32"), std::string::npos) << reader.verify(1, 2);
  fs::resize_file(dir + "/rank_00000.h5", 100);
  EXPECT_NE(reader.verify().find("rank_00000.h5 has 100 bytes"), std::string::npos) << reader.verify();
  fs::remove(dir + "/rank_00000.h5");
  EXPECT_NE(reader.verify().find("rank_00000.h5 is missing"), std::string::npos);
}

TEST(CheckpointReader, RejectsIncompleteMeta) {
  auto params = two_params();
  const std::string root = fresh_dir("incomplete");
  EXPECT_NE(error_of([&] { CheckpointReader r(root); }).find("no meta.json"), std::string::npos);
  const std::string gap = write_checkpoint(root + "/gap", params, {{{0, 0, 10}, {0, 12, 24}, {1, 0, 10}}});
  EXPECT_NE(error_of([&] { CheckpointReader r(gap); }).find("'a.weight' leave a gap at element 10"), std::string::npos)
      << error_of([&] { CheckpointReader r(gap); });
  const std::string overlap = write_checkpoint(root + "/overlap", params, {{{0, 0, 24}, {1, 0, 10}}, {{1, 5, 10}}});
  EXPECT_NE(error_of([&] { CheckpointReader r(overlap); }).find("'b.bias' overlap"), std::string::npos);
  const std::string shortp = write_checkpoint(root + "/short", params, {{{0, 0, 24}, {1, 0, 9}}});
  EXPECT_NE(error_of([&] { CheckpointReader r(shortp); }).find("cover 9 of its 10 elements"), std::string::npos);
  std::ofstream(gap + "/" + kMetaFile) << "{\"format\": \"tetra-checkpoint\", \"version\": 99}";
  EXPECT_NE(error_of([&] { CheckpointReader r(gap); }).find("format version 99"), std::string::npos);
  std::ofstream(gap + "/" + kMetaFile) << "{\"format\": \"tetra-checkpoint\", \"vers";
  EXPECT_NE(error_of([&] { CheckpointReader r(gap); }).find("not valid JSON"), std::string::npos);
}

TEST(CheckpointMeta, JsonRoundTrip) {
  CheckpointMeta m;
  m.step = 7;
  m.tokens_seen = 700;
  m.optimizer_steps = 6;
  m.skipped_steps = 1;
  m.world_size = 2;
  m.dp = 2;
  m.zero_stage = 3;
  m.config_yaml = "run:\n  name: x\n";
  m.rng = {{"seed", 5}};
  m.params = {{"w", {2, 3}}};
  m.files = {{"rank_00000.h5", 0, 123, 0xdeadbeef, {{"w", 0, 3}}}, {"rank_00001.h5", 1, 45, 7, {{"w", 3, 6}}}};
  CheckpointMeta r = meta_from_json(nlohmann::json::parse(to_json(m).dump()), "test");
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.tokens_seen, 700);
  EXPECT_EQ(r.optimizer_steps, 6);
  EXPECT_EQ(r.zero_stage, 3);
  EXPECT_EQ(r.config_yaml, m.config_yaml);
  EXPECT_EQ(r.rng["seed"], 5);
  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_EQ(r.files[0].crc32, 0xdeadbeefu);
  EXPECT_EQ(r.files[1].pieces[0].begin, 3);
  EXPECT_EQ(r.params[0].full_shape, (Shape{2, 3}));
  nlohmann::json bad = to_json(m);
  bad["files"][0]["file"] = "../evil.h5";
  EXPECT_NE(error_of([&] { meta_from_json(bad, "t"); }).find("not a plain file name"), std::string::npos);
  bad = to_json(m);
  bad["mesh"]["world_size"] = 3;
  EXPECT_NE(error_of([&] { meta_from_json(bad, "t"); }).find("2 rank files for a world of 3"), std::string::npos);
}

// ---- consolidate: sharded checkpoint → one file → model.init_from -----------------------------

Config tiny_config() {
  Config c;
  c.run.name = "tiny";
  c.model.arch = "gpt2";
  c.model.vocab_size = 64;
  c.model.seq_len = 16;
  c.model.d_model = 16;
  c.model.n_layers = 2;
  c.model.n_heads = 2;
  c.train.steps = 1;
  c.train.global_batch = 2;
  c.train.micro_batch = 1;
  c.train.seq_len = 16;
  c.data.train = "unused.h5";
  return c;
}

TEST(Consolidate, RoundTripThroughInitFrom) {
  const Config cfg = tiny_config();
  std::unique_ptr<Model> built = model_family_of(cfg).build(model_args(cfg));
  Model& model = *built;
  std::vector<FullParam> params;
  std::vector<std::vector<std::tuple<int, int64_t, int64_t>>> layout(3);
  float base = 0.001f;
  for (Param* p : model.params()) {
    const int i = static_cast<int>(params.size());
    params.push_back(make_param(p->name, p->full_shape, base));
    base += 0.01f;
    // Each parameter cut in three uneven pieces over three rank files, as ZeRO would.
    const int64_t n = shape_numel(p->full_shape), a = n / 3, b = n - n / 5;
    layout[0].push_back({i, 0, a});
    layout[1].push_back({i, a, b});
    layout[2].push_back({i, b, n});
  }
  const std::string root = fresh_dir("consolidate");
  const std::string dir = write_checkpoint(root + "/step_42", params, layout, to_yaml(cfg));
  const std::string out = root + "/full.h5";
  ASSERT_EQ(consolidate_command(dir, out), 0);
  EXPECT_FALSE(fs::exists(out + ".tmp"));

  std::unique_ptr<Model> loaded_model = model_family_of(cfg).build(model_args(cfg));
  Model& loaded = *loaded_model;
  ParamSet set;
  set.build(loaded.params(), Device::cpu(), DType::F32, DType::F32);
  EXPECT_TRUE(load_consolidated(out, loaded).empty());
  size_t i = 0;
  for (Param* p : loaded.params()) {
    ASSERT_EQ(p->name, params[i].name);
    const float* v = p->value.data<float>();
    for (int64_t k = 0; k < p->numel(); ++k)
      ASSERT_EQ(v[k], params[i].master[static_cast<size_t>(k)]) << p->name << "[" << k << "]";
    ++i;
  }

  // What consolidate refuses, and how.
  fs::copy(dir, root + "/step_43.tmp", fs::copy_options::recursive);
  EXPECT_NE(error_of([&] { consolidate_command(root + "/step_43.tmp", out); }).find("incomplete checkpoint"),
            std::string::npos);
  EXPECT_NE(error_of([&] { consolidate_command(root + "/step_44", out); }).find("no such directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { consolidate_command(dir, root + "/no/such/dir/full.h5"); }).find("does not exist"),
            std::string::npos);
  fs::resize_file(dir + "/rank_00002.h5", 64);
  EXPECT_NE(error_of([&] { consolidate_command(dir, out); }).find("cannot be consolidated"), std::string::npos);
}

// ---- fault plans and exit codes ---------------------------------------------------------------

TEST(FaultPlan, ParsesAndRejects) {
  FaultPlan p = FaultPlan::parse("kill@7:rank=1,nan@3,stop@12:rank=0");
  ASSERT_EQ(p.faults().size(), 3u);
  EXPECT_EQ(p.faults()[0].action, FaultPlan::Action::Kill);
  EXPECT_EQ(p.faults()[0].step, 7);
  EXPECT_EQ(p.faults()[0].rank, 1);
  EXPECT_TRUE(p.poison_loss(3, 0));
  EXPECT_FALSE(p.poison_loss(3, 1));
  EXPECT_FALSE(p.poison_loss(4, 0));
  EXPECT_TRUE(FaultPlan::parse("").empty());
  for (const char* bad : {"boom@3", "kill", "kill@x", "kill@3:node=1", "kill@-1", "term@3:rank="})
    EXPECT_NE(error_of([&] { FaultPlan::parse(bad); }).find("TETRA_FAULT"), std::string::npos) << bad;
}

TEST(ExitCodes, ByErrorKind) {
  EXPECT_EQ(exit_code_for(ErrorKind::Config), exit_code::kConfig);
  EXPECT_EQ(exit_code_for(ErrorKind::Usage), exit_code::kConfig);
  EXPECT_EQ(exit_code_for(ErrorKind::Comm), exit_code::kCommTimeout);
  EXPECT_EQ(exit_code_for(ErrorKind::Checkpoint), exit_code::kError);
  EXPECT_EQ(exit_code::kPreempted, 75);
  EXPECT_EQ(signal_of_priority(stop_signal_priority(SIGUSR1)), SIGUSR1);
  EXPECT_GT(stop_signal_priority(SIGTERM), stop_signal_priority(SIGUSR1));
  EXPECT_GT(stop_signal_priority(SIGUSR1), stop_signal_priority(SIGINT));
  EXPECT_EQ(stop_signal_priority(SIGHUP), 0);
}

TEST(StopSignals, RecordedNotFatal) {
  install_stop_signal_handlers();
  clear_stop_signal();
  EXPECT_EQ(stop_signal(), 0);
  std::raise(SIGUSR1);
  EXPECT_EQ(stop_signal(), SIGUSR1);
  std::raise(SIGTERM);
  EXPECT_EQ(stop_signal(), SIGTERM);  // the stronger reason wins
  clear_stop_signal();
  EXPECT_EQ(stop_signal(), 0);
}

}  // namespace
}  // namespace tetra::launch
