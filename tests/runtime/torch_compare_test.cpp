// tetra's CPU ops against PyTorch: tests/runtime/torch_reference.py writes random inputs and PyTorch's
// float64 outputs and gradients to HDF5; every op here runs on the same fp32 inputs, outputs poisoned
// with NaN first, and must agree within ‖out − ref‖/‖ref‖ ≤ 1e-5 (bit for bit for bf16 conversion).
// Accumulating modes run over random pre-filled outputs and must add exactly what the plain mode writes.
//
// Under ctest the file comes from the ops_torch_reference fixture (at TETRA_OPS_REFERENCE_FILE). When
// that file is missing or older than the script (the binary run by hand), the binary runs the script
// itself into a temporary directory.
#include <hdf5.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "op_test_util.h"

#ifndef TETRA_OPS_TORCH_SEED
#define TETRA_OPS_TORCH_SEED 1
#endif
#ifndef TETRA_OPS_REFERENCE_FILE
#define TETRA_OPS_REFERENCE_FILE ""
#endif

namespace tetra::test {
namespace {

constexpr double kTol = 1e-5;
constexpr const char* kScript = TETRA_SOURCE_DIR "/tests/runtime/torch_reference.py";

[[noreturn]] void h5_fail(const std::string& what) { throw std::runtime_error("HDF5: " + what); }

// One case group of the reference file: /<op>/<k>.
class Case {
 public:
  Case(hid_t group, std::string name) : group_(group), name_(std::move(name)) {}
  ~Case() { H5Gclose(group_); }
  Case(const Case&) = delete;
  Case& operator=(const Case&) = delete;

  const std::string& name() const { return name_; }

  Shape shape(const std::string& ds) const {
    hid_t d = open(ds);
    hid_t space = H5Dget_space(d);
    if (space < 0) h5_fail("no dataspace for " + where(ds));
    const int rank = H5Sget_simple_extent_ndims(space);
    if (rank < 0) h5_fail("bad rank of " + where(ds));
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    if (H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0) h5_fail("bad dims of " + where(ds));
    H5Sclose(space);
    H5Dclose(d);
    return Shape(dims.begin(), dims.end());
  }

  // An fp32 dataset as a tetra tensor (the file stores fp32 inputs, so this is exact).
  Tensor f32(const std::string& ds) const {
    Tensor t = Tensor::empty(shape(ds), DType::F32);
    read(ds, H5T_NATIVE_FLOAT, t.data_ptr());
    return t;
  }
  Tensor i32(const std::string& ds) const {
    Tensor t = Tensor::empty(shape(ds), DType::I32);
    read(ds, H5T_NATIVE_INT32, t.data_ptr());
    return t;
  }
  // Expected values, read as double whatever their stored type.
  std::vector<double> f64(const std::string& ds) const {
    std::vector<double> v(static_cast<size_t>(shape_numel(shape(ds))));
    read(ds, H5T_NATIVE_DOUBLE, v.data());
    return v;
  }
  std::vector<uint16_t> u16(const std::string& ds) const {
    std::vector<uint16_t> v(static_cast<size_t>(shape_numel(shape(ds))));
    read(ds, H5T_NATIVE_UINT16, v.data());
    return v;
  }
  double attr(const std::string& a) const {
    hid_t id = H5Aopen(group_, a.c_str(), H5P_DEFAULT);
    if (id < 0) h5_fail("no attribute " + where(a));
    double v = 0;
    const herr_t rc = H5Aread(id, H5T_NATIVE_DOUBLE, &v);
    H5Aclose(id);
    if (rc < 0) h5_fail("cannot read attribute " + where(a));
    return v;
  }
  int64_t iattr(const std::string& a) const { return static_cast<int64_t>(attr(a)); }

 private:
  std::string where(const std::string& what) const { return name_ + "/" + what; }
  hid_t open(const std::string& ds) const {
    hid_t d = H5Dopen2(group_, ds.c_str(), H5P_DEFAULT);
    if (d < 0) h5_fail("no dataset " + where(ds));
    return d;
  }
  void read(const std::string& ds, hid_t mem_type, void* out) const {
    hid_t d = open(ds);
    const herr_t rc = H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out);
    H5Dclose(d);
    if (rc < 0) h5_fail("cannot read " + where(ds));
  }

  hid_t group_;
  std::string name_;
};

// The reference file, produced once per process (or by the ctest fixture) and kept open.
class Reference {
 public:
  static Reference& get() {
    static Reference ref;
    return ref;
  }
  int64_t n_cases(const std::string& op) const {
    hid_t g = H5Gopen2(file_, op.c_str(), H5P_DEFAULT);
    if (g < 0) h5_fail("no group /" + op + " in " + path_);
    hid_t a = H5Aopen(g, "n_cases", H5P_DEFAULT);
    int64_t n = 0;
    const herr_t rc = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_INT64, &n);
    if (a >= 0) H5Aclose(a);
    H5Gclose(g);
    if (rc < 0) h5_fail("no n_cases attribute on /" + op);
    return n;
  }
  std::unique_ptr<Case> at(const std::string& op, int64_t k) const {
    const std::string name = "/" + op + "/" + std::to_string(k);
    hid_t g = H5Gopen2(file_, name.c_str(), H5P_DEFAULT);
    if (g < 0) h5_fail("no group " + name + " in " + path_);
    return std::make_unique<Case>(g, name);
  }

 private:
  Reference() {
    namespace fs = std::filesystem;
    const fs::path fixture = TETRA_OPS_REFERENCE_FILE, script = kScript;
    std::error_code ec;
    bool fresh = false;
    if (!fixture.empty() && fs::exists(fixture, ec)) {
      const auto made = fs::last_write_time(fixture, ec);
      if (!ec) {
        const auto edited = fs::last_write_time(script, ec);
        fresh = !ec && made >= edited;
      }
    }
    if (fresh) {
      path_ = fixture.string();
    } else {
      generate();
    }
    file_ = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file_ < 0) h5_fail("cannot open " + path_);
  }
  ~Reference() {
    if (file_ >= 0) H5Fclose(file_);
    if (!temp_dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir_, ec);
    }
  }

  void generate() {
    const char* env_python = std::getenv("TETRA_PYTHON");
    const std::string python = env_python && *env_python ? env_python : TETRA_PYTHON;
    std::string tmpl = (std::filesystem::temp_directory_path() / "tetra_ops_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    temp_dir_ = tmpl;
    path_ = temp_dir_ + "/torch_reference.h5";
    const std::string cmd = "'" + python + "' '" + std::string(kScript) + "' --seed " +
                            std::to_string(TETRA_OPS_TORCH_SEED) + " --out '" + path_ + "'";
    const int rc = std::system(cmd.c_str());
    if (rc != 0)
      throw std::runtime_error("the PyTorch reference script failed (status " + std::to_string(rc) + "): " + cmd +
                               "\nSet TETRA_PYTHON to a python3 with torch, h5py and numpy.");
  }

  std::string path_, temp_dir_;
  hid_t file_ = -1;
};

#define EXPECT_CLOSE(out, ref, what) \
  EXPECT_LE(rel_error(out, ref), kTol) << c->name() << ": " << what << " differs from PyTorch"

Tensor random_like(Rng& rng, const Tensor& t) { return random_tensor(rng, t.shape()); }

TEST(TorchReference, Linear) {
  Rng rng(101);
  const auto& ref = Reference::get();
  const int64_t n = ref.n_cases("linear");
  ASSERT_EQ(n, 8);
  for (int64_t k = 0; k < n; ++k) {
    auto c = ref.at("linear", k);
    const bool bias = c->iattr("bias") != 0, gelu = c->iattr("gelu") != 0;
    const Tensor x = c->f32("x"), w = c->f32("w"), b = bias ? c->f32("b") : Tensor(), dy = c->f32("dy");
    const auto act = gelu ? ops::Activation::Gelu : ops::Activation::None;
    Tensor y = poisoned(dy.shape()), pre = poisoned(dy.shape());
    ops::linear_forward(y, x, w, b, act, gelu ? &pre : nullptr);
    EXPECT_CLOSE(y, c->f64("y"), "y");
    Tensor dpre = dy;
    if (gelu) {
      EXPECT_CLOSE(pre, c->f64("pre_act"), "pre_act");
      dpre = poisoned(dy.shape());
      ops::gelu_backward(dpre, dy, pre);
    }
    Tensor dx = poisoned(x.shape()), dw = poisoned(w.shape()), db = poisoned({w.dim(0)});
    ops::linear_backward_input(dx, dpre, w, false);
    ops::linear_backward_weight(dw, bias ? &db : nullptr, dpre, x, false);
    EXPECT_CLOSE(dx, c->f64("dx"), "dx");
    EXPECT_CLOSE(dw, c->f64("dw"), "dw");
    if (bias) {
      EXPECT_CLOSE(db, c->f64("db"), "db");
    }
    // Accumulating over random contents.
    Tensor dx2 = random_like(rng, dx), dw2 = random_like(rng, dw), db2 = random_like(rng, db);
    const auto dx0 = to_doubles(dx2), dw0 = to_doubles(dw2), db0 = to_doubles(db2);
    ops::linear_backward_input(dx2, dpre, w, true);
    ops::linear_backward_weight(dw2, bias ? &db2 : nullptr, dpre, x, true);
    EXPECT_CLOSE(dx2, plus(c->f64("dx"), dx0), "accumulated dx");
    EXPECT_CLOSE(dw2, plus(c->f64("dw"), dw0), "accumulated dw");
    if (bias) {
      EXPECT_CLOSE(db2, plus(c->f64("db"), db0), "accumulated db");
    }
  }
}

// y = x·wᵀ + b + residual, into a separate output and in place over the residual.
TEST(TorchReference, LinearResidual) {
  const auto& ref = Reference::get();
  const int64_t n = ref.n_cases("linear_residual");
  ASSERT_EQ(n, 3);
  for (int64_t k = 0; k < n; ++k) {
    auto c = ref.at("linear_residual", k);
    const bool bias = c->iattr("bias") != 0;
    const Tensor x = c->f32("x"), w = c->f32("w"), b = bias ? c->f32("b") : Tensor(), res = c->f32("residual");
    Tensor y = poisoned(res.shape());
    ops::linear_forward(y, x, w, b, ops::Activation::None, nullptr, &res);
    EXPECT_CLOSE(y, c->f64("y"), "y");
    EXPECT_EQ(rel_error(res, c->f64("residual")), 0.0) << c->name() << ": the residual must not change";
    Tensor in_place = clone(res);
    ops::linear_forward(in_place, x, w, b, ops::Activation::None, nullptr, &in_place);
    EXPECT_CLOSE(in_place, c->f64("y"), "y computed in place over the residual");
  }
}

TEST(TorchReference, Gelu) {
  const auto& ref = Reference::get();
  for (int64_t k = 0; k < ref.n_cases("gelu"); ++k) {
    auto c = ref.at("gelu", k);
    const Tensor x = c->f32("x"), dy = c->f32("dy");
    Tensor y = poisoned(x.shape()), dx = poisoned(x.shape());
    ops::gelu_forward(y, x);
    ops::gelu_backward(dx, dy, x);
    EXPECT_CLOSE(y, c->f64("y"), "y");
    EXPECT_CLOSE(dx, c->f64("dx"), "dx");
  }
}

TEST(TorchReference, LayerNorm) {
  Rng rng(102);
  const auto& ref = Reference::get();
  for (int64_t k = 0; k < ref.n_cases("layernorm"); ++k) {
    auto c = ref.at("layernorm", k);
    const Tensor x = c->f32("x"), w = c->f32("w"), b = c->f32("b"), dy = c->f32("dy");
    const Shape rows = c->shape("mean");
    Tensor y = poisoned(x.shape()), mean = poisoned(rows), rstd = poisoned(rows);
    ops::layernorm_forward(y, mean, rstd, x, w, b, static_cast<float>(c->attr("eps")));
    EXPECT_CLOSE(y, c->f64("y"), "y");
    EXPECT_CLOSE(mean, c->f64("mean"), "mean");
    EXPECT_CLOSE(rstd, c->f64("rstd"), "rstd");
    // Weight gradients always accumulate: start them from random values.
    Tensor dx = poisoned(x.shape()), dw = random_like(rng, w), db = random_like(rng, b);
    const auto dw0 = to_doubles(dw), db0 = to_doubles(db);
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false);
    EXPECT_CLOSE(dx, c->f64("dx"), "dx");
    EXPECT_CLOSE(dw, plus(c->f64("dw"), dw0), "dw");
    EXPECT_CLOSE(db, plus(c->f64("db"), db0), "db");
    Tensor dx2 = random_like(rng, dx);
    const auto dx0 = to_doubles(dx2);
    ops::layernorm_backward(dx2, dw, db, dy, x, w, mean, rstd, true);
    EXPECT_CLOSE(dx2, plus(c->f64("dx"), dx0), "accumulated dx");
  }
}

// dx = dresidual + the gradient through the LayerNorm, into a separate dx and in place over dresidual.
TEST(TorchReference, LayerNormResidual) {
  Rng rng(104);
  const auto& ref = Reference::get();
  const int64_t n = ref.n_cases("layernorm_residual");
  ASSERT_EQ(n, 2);
  for (int64_t k = 0; k < n; ++k) {
    auto c = ref.at("layernorm_residual", k);
    const Tensor x = c->f32("x"), w = c->f32("w"), b = c->f32("b"), dy = c->f32("dy"), dres = c->f32("dresidual");
    const Shape rows = c->shape("mean");
    Tensor y = poisoned(x.shape()), mean = poisoned(rows), rstd = poisoned(rows);
    ops::layernorm_forward(y, mean, rstd, x, w, b, static_cast<float>(c->attr("eps")));
    EXPECT_CLOSE(mean, c->f64("mean"), "mean");
    EXPECT_CLOSE(rstd, c->f64("rstd"), "rstd");
    Tensor dx = poisoned(x.shape()), dw = random_like(rng, w), db = random_like(rng, b);
    const auto dw0 = to_doubles(dw), db0 = to_doubles(db);
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, false, &dres);
    EXPECT_CLOSE(dx, c->f64("dx"), "dx");
    EXPECT_CLOSE(dw, plus(c->f64("dw"), dw0), "dw");
    EXPECT_CLOSE(db, plus(c->f64("db"), db0), "db");
    Tensor in_place = clone(dres), dw2 = random_like(rng, w), db2 = random_like(rng, b);
    ops::layernorm_backward(in_place, dw2, db2, dy, x, w, mean, rstd, false, &in_place);
    EXPECT_CLOSE(in_place, c->f64("dx"), "dx computed in place over dresidual");
  }
}

TEST(TorchReference, Embedding) {
  Rng rng(103);
  const auto& ref = Reference::get();
  for (int64_t k = 0; k < ref.n_cases("embedding"); ++k) {
    auto c = ref.at("embedding", k);
    const bool pos = c->iattr("pos") != 0;
    const int64_t T = c->iattr("T");
    const Tensor ids = c->i32("ids"), wte = c->f32("wte"), wpe = pos ? c->f32("wpe") : Tensor(), dy = c->f32("dy");
    Tensor y = poisoned(dy.shape());
    ops::embedding_forward(y, ids, wte, wpe, T);
    EXPECT_CLOSE(y, c->f64("y"), "y");
    // Gradients accumulate: start from random values.
    Tensor dwte = random_like(rng, wte), dwpe = random_tensor(rng, c->shape("wpe"));
    const auto dwte0 = to_doubles(dwte), dwpe0 = to_doubles(dwpe);
    ops::embedding_backward(dwte, pos ? &dwpe : nullptr, dy, ids, T);
    EXPECT_CLOSE(dwte, plus(c->f64("dwte"), dwte0), "dwte");
    EXPECT_CLOSE(dwpe, plus(c->f64("dwpe"), dwpe0), "dwpe");  // zeros added when there is no wpe
  }
}

TEST(TorchReference, Attention) {
  const auto& ref = Reference::get();
  ASSERT_GE(ref.n_cases("attention"), 4);
  for (int64_t k = 0; k < ref.n_cases("attention"); ++k) {
    auto c = ref.at("attention", k);
    const int64_t B = c->iattr("B"), T = c->iattr("T"), H = c->iattr("H"), D = c->iattr("D");
    const Tensor qkv = c->f32("qkv"), dout = c->f32("dout");
    Tensor out = poisoned({B, T, H * D}), lse = poisoned({B, H, T});
    ops::attention_forward(out, lse, qkv, H);
    EXPECT_CLOSE(out, c->f64("out"), "out");
    EXPECT_CLOSE(lse, c->f64("lse"), "lse");
    Tensor dqkv = poisoned(qkv.shape());
    ops::attention_backward(dqkv, dout, qkv, out, lse, H);
    EXPECT_CLOSE(dqkv, c->f64("dqkv"), "dqkv");
  }
}

// Hugging Face's LlamaRMSNorm; the residual case also runs in place over dresidual.
TEST(TorchReference, RmsNorm) {
  Rng rng(105);
  const auto& ref = Reference::get();
  const int64_t n = ref.n_cases("rmsnorm");
  ASSERT_EQ(n, 3);
  for (int64_t k = 0; k < n; ++k) {
    auto c = ref.at("rmsnorm", k);
    const bool residual = c->iattr("residual") != 0;
    const Tensor x = c->f32("x"), w = c->f32("w"), dy = c->f32("dy"), dres = c->f32("dresidual");
    Tensor y = poisoned(x.shape()), rstd = poisoned(c->shape("rstd"));
    ops::rmsnorm_forward(y, rstd, x, w, static_cast<float>(c->attr("eps")));
    EXPECT_CLOSE(y, c->f64("y"), "y");
    EXPECT_CLOSE(rstd, c->f64("rstd"), "rstd");
    Tensor dx = poisoned(x.shape()), dw = random_like(rng, w);  // dw accumulates
    const auto dw0 = to_doubles(dw);
    ops::rmsnorm_backward(dx, dw, dy, x, w, rstd, false, residual ? &dres : nullptr);
    EXPECT_CLOSE(dx, c->f64("dx"), "dx");
    EXPECT_CLOSE(dw, plus(c->f64("dw"), dw0), "dw");
    if (residual) {
      Tensor in_place = clone(dres), dw2 = random_like(rng, w);
      ops::rmsnorm_backward(in_place, dw2, dy, x, w, rstd, false, &in_place);
      EXPECT_CLOSE(in_place, c->f64("dx"), "dx computed in place over dresidual");
    } else {
      Tensor dx2 = random_like(rng, dx);
      const auto dx0 = to_doubles(dx2);
      ops::rmsnorm_backward(dx2, dw, dy, x, w, rstd, true);
      EXPECT_CLOSE(dx2, plus(c->f64("dx"), dx0), "accumulated dx");
    }
  }
}

// transformers' rotate-half RoPE on the q and k heads of a fused qkv (v untouched), and its gradient.
TEST(TorchReference, Rope) {
  const auto& ref = Reference::get();
  const int64_t n = ref.n_cases("rope");
  ASSERT_EQ(n, 4);
  for (int64_t k = 0; k < n; ++k) {
    auto c = ref.at("rope", k);
    const int64_t H = c->iattr("H"), Hkv = c->iattr("Hkv");
    const float theta = static_cast<float>(c->attr("theta"));
    Tensor qkv = c->f32("qkv"), dy = c->f32("dy");
    ops::rope_forward(qkv, H, Hkv, theta);
    EXPECT_CLOSE(qkv, c->f64("y"), "rotated qkv");
    ops::rope_backward(dy, H, Hkv, theta);
    EXPECT_CLOSE(dy, c->f64("dqkv"), "dqkv");
  }
}

TEST(TorchReference, SwiGlu) {
  const auto& ref = Reference::get();
  const int64_t n = ref.n_cases("swiglu");
  ASSERT_EQ(n, 2);
  for (int64_t k = 0; k < n; ++k) {
    auto c = ref.at("swiglu", k);
    const Tensor gu = c->f32("gate_up"), dh = c->f32("dh");
    Tensor h = poisoned(dh.shape()), dgu = poisoned(gu.shape());
    ops::swiglu_forward(h, gu);
    EXPECT_CLOSE(h, c->f64("h"), "h");
    ops::swiglu_backward(dgu, dh, gu);
    EXPECT_CLOSE(dgu, c->f64("d_gate_up"), "d_gate_up");
  }
}

// Grouped-query attention (n_kv_heads ∈ {1, H/4, H/2, H}) against transformers' repeat_kv formulation.
TEST(TorchReference, GroupedQueryAttention) {
  const auto& ref = Reference::get();
  const int64_t n = ref.n_cases("gqa_attention");
  ASSERT_EQ(n, 5);
  for (int64_t k = 0; k < n; ++k) {
    auto c = ref.at("gqa_attention", k);
    const int64_t B = c->iattr("B"), T = c->iattr("T"), H = c->iattr("H"), Hkv = c->iattr("Hkv"),
                  D = c->iattr("D");
    const Tensor qkv = c->f32("qkv"), dout = c->f32("dout");
    Tensor out = poisoned({B, T, H * D}), lse = poisoned({B, H, T});
    ops::attention_forward(out, lse, qkv, H, Hkv);
    EXPECT_CLOSE(out, c->f64("out"), "out");
    EXPECT_CLOSE(lse, c->f64("lse"), "lse");
    Tensor dqkv = poisoned(qkv.shape());
    ops::attention_backward(dqkv, dout, qkv, out, lse, H, Hkv);
    EXPECT_CLOSE(dqkv, c->f64("dqkv"), "dqkv");
  }
}

TEST(TorchReference, CrossEntropy) {
  const auto& ref = Reference::get();
  for (int64_t k = 0; k < ref.n_cases("cross_entropy"); ++k) {
    auto c = ref.at("cross_entropy", k);
    const Tensor logits = c->f32("logits"), targets = c->i32("targets");
    const float grad_scale = static_cast<float>(c->attr("grad_scale"));
    const int64_t N = logits.dim(0);
    Tensor losses = poisoned({N}), dlogits = poisoned(logits.shape());
    ops::softmax_cross_entropy(losses, &dlogits, logits, targets, grad_scale);
    EXPECT_CLOSE(losses, c->f64("losses"), "losses");
    EXPECT_CLOSE(dlogits, c->f64("dlogits"), "dlogits");
    // Loss only, and in place (dlogits aliasing logits).
    Tensor losses2 = poisoned({N}), in_place = clone(logits);
    ops::softmax_cross_entropy(losses2, nullptr, logits, targets, grad_scale);
    EXPECT_CLOSE(losses2, c->f64("losses"), "losses without gradient");
    ops::softmax_cross_entropy(losses2, &in_place, in_place, targets, grad_scale);
    EXPECT_CLOSE(in_place, c->f64("dlogits"), "in-place dlogits");
  }
}

TEST(TorchReference, AdamW) {
  const auto& ref = Reference::get();
  for (int64_t k = 0; k < ref.n_cases("adamw"); ++k) {
    auto c = ref.at("adamw", k);
    const bool bf16 = c->iattr("bf16") != 0;
    const int64_t n = c->iattr("n"), steps = c->iattr("steps");
    ops::AdamWHyper h;
    h.lr = static_cast<float>(c->attr("lr"));
    h.beta1 = static_cast<float>(c->attr("beta1"));
    h.beta2 = static_cast<float>(c->attr("beta2"));
    h.eps = static_cast<float>(c->attr("eps"));
    h.weight_decay = static_cast<float>(c->attr("weight_decay"));
    h.grad_scale = static_cast<float>(c->attr("grad_scale"));
    Tensor master = c->f32("p0"), grads = c->f32("grads");
    Tensor m = Tensor::zeros({n}, DType::F32), v = Tensor::zeros({n}, DType::F32);
    Tensor working = poisoned({n}, bf16 ? DType::BF16 : DType::F32);
    for (int64_t s = 0; s < steps; ++s) {
      Tensor g = grads.narrow(s, 1).view({n});
      if (bf16) {  // the reference rounded these gradients to bf16 already: the conversion is exact
        Tensor gb = Tensor::empty({n}, DType::BF16);
        ops::copy(gb, g);
        g = gb;
      }
      h.step = s + 1;
      poison(working);
      ops::adamw_update(master, g, m, v, h, &working);
    }
    EXPECT_CLOSE(master, c->f64("master"), "master");
    EXPECT_CLOSE(m, c->f64("m"), "m");
    EXPECT_CLOSE(v, c->f64("v"), "v");
    // working is the new master in its own dtype.
    for (int64_t i = 0; i < n; ++i) {
      const float p = master.data<float>()[i];
      if (bf16) ASSERT_EQ(working.bf16_bits()[i], float_to_bf16(p)) << c->name() << " element " << i;
      else ASSERT_EQ(working.data<float>()[i], p) << c->name() << " element " << i;
    }
  }
}

TEST(TorchReference, SumSquares) {
  const auto& ref = Reference::get();
  for (int64_t k = 0; k < ref.n_cases("sum_squares"); ++k) {
    auto c = ref.at("sum_squares", k);
    Tensor x = c->f32("x");
    if (c->iattr("bf16") != 0) {
      Tensor xb = Tensor::empty(x.shape(), DType::BF16);
      ops::copy(xb, x);  // exact: the reference values are bf16 already
      x = xb;
    }
    Tensor acc = c->f32("acc0");
    ops::sum_squares(acc, x);
    EXPECT_CLOSE(acc, c->f64("acc"), "acc");
  }
}

TEST(TorchReference, AddAndScale) {
  const auto& ref = Reference::get();
  for (int64_t k = 0; k < ref.n_cases("elementwise"); ++k) {
    auto c = ref.at("elementwise", k);
    const Tensor a = c->f32("a"), b = c->f32("b");
    Tensor y = poisoned(a.shape());
    ops::add(y, a, b);
    EXPECT_CLOSE(y, c->f64("add"), "add");
    Tensor x = c->f32("x");
    ops::scale(x, static_cast<float>(c->attr("s")));
    EXPECT_EQ(rel_error(x, c->f64("scaled")), 0.0) << c->name() << ": scale is one fp32 multiply";
  }
}

TEST(TorchReference, CopyBf16MatchesTorchRounding) {
  const auto& ref = Reference::get();
  auto c = ref.at("copy", 0);
  const Tensor x = c->f32("fp32_in");
  const auto want = c->u16("bf16_out");
  Tensor h = poisoned(x.shape(), DType::BF16);
  ops::copy(h, x);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (h.bf16_bits()[i] != want[static_cast<size_t>(i)] && mismatches++ < 5)
      ADD_FAILURE() << "fp32 " << x.data<float>()[i] << " -> bf16 0x" << std::hex << h.bf16_bits()[i]
                    << ", PyTorch gives 0x" << want[static_cast<size_t>(i)];
  EXPECT_EQ(mismatches, 0);

  const auto bits = c->u16("bf16_in");
  Tensor hb = Tensor::empty({static_cast<int64_t>(bits.size())}, DType::BF16);
  std::copy(bits.begin(), bits.end(), hb.bf16_bits());
  Tensor f = poisoned(hb.shape());
  ops::copy(f, hb);
  const auto want_f = c->f64("fp32_out");
  for (size_t i = 0; i < bits.size(); ++i)
    ASSERT_EQ(static_cast<double>(f.data<float>()[i]), want_f[i]) << "bf16 0x" << std::hex << bits[i];
}

}  // namespace
}  // namespace tetra::test
