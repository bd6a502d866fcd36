// runtime/safetensors against an independent reader and writer written in Python (json + numpy,
// tests/models/safetensors_reference.py): a file Python writes is read by tetra with the right
// values, a file tetra writes is read by Python with the right values, and malformed files are
// rejected with an error that says what is wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "runtime/hdf5_file.h"
#include "runtime/random.h"
#include "runtime/safetensors.h"

namespace fs = std::filesystem;
using namespace tetra;

namespace {

// A directory of this test process, removed when it ends.
struct WorkDir {
  fs::path path = fs::temp_directory_path() / ("tetra_safetensors_" + std::to_string(::getpid()));
  WorkDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~WorkDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const fs::path& work_dir() {
  static const WorkDir d;
  return d.path;
}

int run_reference(const std::string& mode, const fs::path& file, const fs::path& expect) {
  const std::string cmd = std::string(TETRA_PYTHON) + " " + TETRA_SOURCE_DIR + "/tests/models/safetensors_reference.py " +
                          mode + " " + file.string() + " " + expect.string() + " > " + file.string() + ".log 2>&1";
  return std::system(cmd.c_str());
}

std::string log_of(const fs::path& file) {
  std::ifstream in(file.string() + ".log");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Checkpoint) << e.what();
    return e.what();
  }
  return "(no error)";
}

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::F32);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(rng.normal() * 3.0);
  return t;
}

// A file of raw bytes: an 8-byte header length, the header text, then `data` bytes.
fs::path raw_file(const std::string& name, const std::string& header, size_t data, int64_t length = -1) {
  const fs::path p = work_dir() / name;
  std::ofstream out(p, std::ios::binary);
  const uint64_t n = length >= 0 ? static_cast<uint64_t>(length) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header << std::string(data, '\0');
  return p;
}

}  // namespace

TEST(Safetensors, PythonWritesTetraReads) {
  const fs::path file = work_dir() / "python.safetensors", expect = work_dir() / "python_expect.h5";
  ASSERT_EQ(run_reference("write", file, expect), 0) << log_of(file);
  safetensors::Reader r(file.string());
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.metadata().at("writer"), "python reference");
  ASSERT_EQ(r.tensors().size(), 7u);
  EXPECT_EQ(r.find("b.bf16")->dtype, "BF16");
  EXPECT_EQ(r.find("b.bf16")->shape, (Shape{4, 2, 3}));
  EXPECT_EQ(r.find("g.scalar")->shape, Shape{});
  Hdf5File want(expect.string(), Hdf5File::Mode::Read);
  int checked = 0;
  for (const std::string& name : want.dataset_names()) {
    Tensor got = r.read_f32(name);
    Tensor w = want.read(name, DType::F64);
    ASSERT_EQ(got.shape(), w.shape()) << name;
    for (int64_t i = 0; i < got.numel(); ++i)
      EXPECT_EQ(got.data<float>()[i], static_cast<float>(w.data<double>()[i])) << name << "[" << i << "]";
    ++checked;
  }
  EXPECT_EQ(checked, 6);
  EXPECT_NE(error_of([&] { r.read_f32("f.i64"); }).find("tensor 'f.i64' is I64; weights are read from F32, BF16"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.read_f32("nope"); }).find("no tensor 'nope'"), std::string::npos);
}

TEST(Safetensors, TetraWritesPythonReads) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::string tag = dtype == DType::F32 ? "f32" : "bf16";
    const fs::path file = work_dir() / ("tetra_" + tag + ".safetensors"), expect = work_dir() / ("tetra_" + tag + ".h5");
    std::vector<safetensors::NamedTensor> tensors = {{"model.layers.0.mlp.up_proj.weight", random_tensor({6, 4}, 1)},
                                                     {"model.norm.weight", random_tensor({4}, 2)},
                                                     {"three.d", random_tensor({2, 3, 5}, 3)},
                                                     {"empty", Tensor::empty({0, 3}, DType::F32)}};
    safetensors::write(file.string(), tensors, dtype, {{"format", "pt"}});
    EXPECT_FALSE(fs::exists(file.string() + ".tmp"));
    {
      Hdf5File h(expect.string(), Hdf5File::Mode::Create);
      for (const auto& t : tensors) h.write(t.name, t.value);
      h.set_attr("dtype", std::string(dtype == DType::F32 ? "F32" : "BF16"));
    }
    ASSERT_EQ(run_reference("read", file, expect), 0) << log_of(file);
    // And tetra reads its own file back: exact in F32, the bf16 rounding otherwise.
    safetensors::Reader r(file.string());
    EXPECT_EQ(r.metadata().at("format"), "pt");
    for (const auto& t : tensors) {
      Tensor back = r.read_f32(t.name);
      ASSERT_EQ(back.shape(), t.value.shape()) << t.name;
      for (int64_t i = 0; i < back.numel(); ++i) {
        const float v = t.value.data<float>()[i];
        EXPECT_EQ(back.data<float>()[i], dtype == DType::F32 ? v : bf16_to_float(float_to_bf16(v))) << t.name;
      }
    }
  }
}

TEST(Safetensors, MalformedFilesAreRejectedWithTheReason) {
  auto header = [](const nlohmann::json& j) { return j.dump(); };
  const nlohmann::json ok = {{"x", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}}};
  EXPECT_NO_THROW(safetensors::Reader(raw_file("ok.st", header(ok), 16).string()));
  struct Case {
    std::string name;
    fs::path file;
    std::string expect;
  };
  nlohmann::json two = ok;
  two["y"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}};
  nlohmann::json gap = {{"x", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                        {"y", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {12, 20}}}}};
  nlohmann::json bad_dtype = {{"x", {{"dtype", "F12"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}}};
  nlohmann::json bad_size = {{"x", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 16}}}}};
  nlohmann::json past_end = {{"x", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {8, 24}}}}};
  nlohmann::json reversed = {{"x", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 4}}}}};
  nlohmann::json neg_shape = {{"x", {{"dtype", "F32"}, {"shape", {-2, 2}}, {"data_offsets", {0, 16}}}}};
  nlohmann::json meta = ok;
  meta["__metadata__"] = {{"step", 3}};
  nlohmann::json no_offsets = {{"x", {{"dtype", "F32"}, {"shape", {2, 2}}}}};
  const std::vector<Case> cases = {
      {"length_past_end", raw_file("len.st", header(ok), 16, 1 << 20), "the header length says 1048576 bytes"},
      {"length_zero", raw_file("len0.st", header(ok), 16, 0), "the header length says 0 bytes"},
      {"not_json", raw_file("json.st", "{\"x\": [1, 2", 16), "the header is not JSON"},
      {"not_object", raw_file("list.st", "[1, 2, 3]", 16), "the header is not a JSON object"},
      {"unknown_dtype", raw_file("dtype.st", header(bad_dtype), 16), "tensor 'x' has unknown dtype 'F12'"},
      {"shape_vs_bytes", raw_file("size.st", header(bad_size), 16),
       "tensor 'x': shape [2,3] of F32 needs 24 bytes, data_offsets [0,16] hold 16"},
      {"past_end", raw_file("end.st", header(past_end), 16), "data_offsets [8,24] run past the 16 bytes of data"},
      {"reversed_offsets", raw_file("rev.st", header(reversed), 8), "data_offsets [8,4] end before they begin"},
      {"negative_shape", raw_file("neg.st", header(neg_shape), 16), "is not a list of sizes"},
      {"overlap", raw_file("overlap.st", header(two), 16), "tensors 'x' and 'y' overlap"},
      {"hole", raw_file("hole.st", header(gap), 20), "bytes 8..12 of the data belong to no tensor"},
      {"trailing_bytes", raw_file("tail.st", header(ok), 20), "the last 4 bytes of the data belong to no tensor"},
      {"metadata_not_string", raw_file("meta.st", header(meta), 16), "__metadata__.step is not a string"},
      {"no_offsets", raw_file("nooff.st", header(no_offsets), 16), "tensor 'x' lacks dtype, shape or data_offsets"},
  };
  {
    std::ofstream(work_dir() / "tiny.st", std::ios::binary) << "abc";
    const std::string e = error_of([&] { safetensors::Reader((work_dir() / "tiny.st").string()); });
    EXPECT_NE(e.find("not a valid safetensors file: the file has 3 bytes, fewer than the 8-byte header length"),
              std::string::npos)
        << e;
  }
  for (const Case& c : cases) {
    const std::string e = error_of([&] { safetensors::Reader(c.file.string()); });
    EXPECT_NE(e.find(c.file.string() + ": not a valid safetensors file: "), std::string::npos) << c.name << ": " << e;
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.name << ": " << e;
  }
  EXPECT_NE(error_of([&] { safetensors::Reader((work_dir() / "missing.st").string()); }).find("cannot read"),
            std::string::npos);
}
