// tetra's CPU mixture-of-experts ops against PyTorch: tests/runtime/moe_torch_reference.py writes
// Hugging Face's DeepseekV3 router and MoE layer (float64 from fp32 inputs) to HDF5; here the ops
// run on the same inputs, outputs poisoned with NaN first, and must agree within
// ‖out − ref‖/‖ref‖ ≤ 1e-5; expert ids and counts exactly.
//
// Under ctest the file comes from the moe_torch_reference fixture (TETRA_MOE_REFERENCE_FILE); run by
// hand with the file missing or older than the script, the binary runs the script itself.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "op_test_util.h"
#include "runtime/hdf5_file.h"

#ifndef TETRA_MOE_REFERENCE_FILE
#define TETRA_MOE_REFERENCE_FILE ""
#endif

namespace tetra::test {
namespace {

constexpr double kTol = 1e-5;
constexpr const char* kScript = TETRA_SOURCE_DIR "/tests/runtime/moe_torch_reference.py";

// The reference file: the fixture's when it is newer than the script, else generated once per process.
class Reference {
 public:
  static Reference& get() {
    static Reference ref;
    return ref;
  }
  const Hdf5File& file() const { return *file_; }
  int64_t n_cases(const std::string& op) const { return file_->attr_int("n_cases", "/" + op); }

 private:
  Reference() {
    namespace fs = std::filesystem;
    const fs::path fixture = TETRA_MOE_REFERENCE_FILE, script = kScript;
    std::error_code ec;
    bool fresh = false;
    if (!fixture.empty() && fs::exists(fixture, ec)) {
      const auto made = fs::last_write_time(fixture, ec);
      if (!ec) {
        const auto edited = fs::last_write_time(script, ec);
        fresh = !ec && made >= edited;
      }
    }
    std::string path = fixture.string();
    if (!fresh) {
      const char* env_python = std::getenv("TETRA_PYTHON");
      const std::string python = env_python && *env_python ? env_python : TETRA_PYTHON;
      std::string tmpl = (fs::temp_directory_path() / "tetra_moe_XXXXXX").string();
      if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
      temp_dir_ = tmpl;
      path = temp_dir_ + "/moe_torch_reference.h5";
      const std::string cmd = "'" + python + "' '" + std::string(kScript) + "' --seed 1 --out '" + path + "'";
      if (std::system(cmd.c_str()) != 0)
        throw std::runtime_error("the PyTorch reference script failed: " + cmd +
                                 "\nSet TETRA_PYTHON to a python3 with torch, h5py and numpy.");
    }
    file_ = std::make_unique<Hdf5File>(path, Hdf5File::Mode::Read);
  }
  ~Reference() {
    file_.reset();
    if (!temp_dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir_, ec);
    }
  }
  std::unique_ptr<Hdf5File> file_;
  std::string temp_dir_;
};

struct Case {
  std::string at;
  const Hdf5File& f;
  Tensor f32(const std::string& ds) const { return f.read(at + "/" + ds, DType::F32); }
  Tensor i32(const std::string& ds) const { return f.read(at + "/" + ds, DType::I32); }
  std::vector<double> read64(const std::string& ds) const {
    const Tensor t = f.read(at + "/" + ds, DType::F64);
    return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
  }
  int64_t i(const std::string& a) const { return f.attr_int(a, at); }
  double d(const std::string& a) const { return f.attr_double(a, at); }
};

Case case_at(const std::string& op, int64_t k) { return Case{"/" + op + "/" + std::to_string(k), Reference::get().file()}; }

#define EXPECT_CLOSE(out, ref, what) \
  EXPECT_LE(rel_error(out, ref), kTol) << c.at << ": " << what << " differs from PyTorch"

void expect_equal_ints(const Tensor& out, const Tensor& ref, const std::string& what) {
  ASSERT_EQ(out.numel(), ref.numel()) << what;
  const int32_t* a = out.data<int32_t>();
  const int32_t* b = ref.data<int32_t>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < out.numel(); ++i) wrong += a[i] != b[i];
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << out.numel() << " differ";
}

Tensor poisoned_ints(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::I32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = -7;
  return t;
}

// Hugging Face's router: ids, weights, counts; the backward through the weights, then with the
// sequence-wise balance loss's gradient as well; the balance loss itself.
TEST(TorchReferenceMoe, Router) {
  const int64_t n = Reference::get().n_cases("router");
  ASSERT_EQ(n, 5);
  for (int64_t kc = 0; kc < n; ++kc) {
    const Case c = case_at("router", kc);
    const int64_t N = c.i("N"), E = c.i("E"), k = c.i("k"), T = c.i("seq_len");
    ops::MoeRouting r;
    r.top_k = k;
    r.n_group = c.i("n_group");
    r.topk_group = c.i("topk_group");
    r.route_scale = static_cast<float>(c.d("route_scale"));
    const Tensor logits = c.f32("logits"), bias = c.f32("bias"), dw = c.f32("d_weights");
    Tensor ids = poisoned_ints({N, k}), w = poisoned({N, k}), counts = poisoned_ints({E});
    Tensor load = Tensor::zeros({E}, DType::I32);
    ops::moe_router_forward(ids, w, counts, logits, bias, r, &load);
    expect_equal_ints(ids, c.i32("expert_ids"), c.at + " expert_ids");
    expect_equal_ints(counts, c.i32("counts"), c.at + " counts");
    expect_equal_ints(load, c.i32("counts"), c.at + " load (from 0)");
    EXPECT_CLOSE(w, c.read64("weights"), "weights");

    Tensor d_logits = poisoned({N, E});
    ops::moe_router_backward(d_logits, dw, logits, ids, r);
    EXPECT_CLOSE(d_logits, c.read64("d_logits"), "d_logits");

    Tensor loss = Tensor::zeros({1}, DType::F64), g = poisoned({N / T, E});
    const float loss_scale = static_cast<float>(c.d("loss_scale")), grad_scale = static_cast<float>(c.d("grad_scale"));
    ops::moe_balance_loss(loss, g, logits, ids, T, loss_scale, grad_scale);
    const double want = c.read64("balance_loss")[0];
    EXPECT_NEAR(loss.data<double>()[0], want, 1e-6 * std::fabs(want)) << c.at << ": balance loss";
    EXPECT_CLOSE(g, c.read64("d_prob_sums"), "d_prob_sums");
    Tensor d_logits_bal = poisoned({N, E});
    ops::moe_router_backward(d_logits_bal, dw, logits, ids, r, &g);
    EXPECT_CLOSE(d_logits_bal, c.read64("d_logits_balance"), "d_logits with the balance loss");
  }
}

// The routed part of DeepseekV3MoE composed from the ops: gate GEMM (fp32 linear), router, permute,
// grouped gate|up GEMM, SwiGLU, grouped down GEMM, weighted combine; and the whole backward.
TEST(TorchReferenceMoe, Layer) {
  const int64_t n = Reference::get().n_cases("moe_layer");
  ASSERT_EQ(n, 2);
  for (int64_t kc = 0; kc < n; ++kc) {
    const Case c = case_at("moe_layer", kc);
    const int64_t N = c.i("N"), d = c.i("d"), E = c.i("E"), k = c.i("k"), F = c.i("F"), R = N * k;
    ops::MoeRouting r;
    r.top_k = k;
    r.n_group = c.i("n_group");
    r.topk_group = c.i("topk_group");
    r.route_scale = static_cast<float>(c.d("route_scale"));
    const Tensor x = c.f32("x"), gate_w = c.f32("gate_w"), bias = c.f32("bias"), dy = c.f32("dy");
    const Tensor wg = c.f32("w_gate"), wu = c.f32("w_up"), wd = c.f32("w_down");
    // gate|up fused per expert: w_gu[e] = [w_gate[e]; w_up[e]]  [E, 2F, d]
    Tensor w_gu = Tensor::empty({E, 2 * F, d}, DType::F32);
    for (int64_t e = 0; e < E; ++e) {
      std::copy(wg.data<float>() + e * F * d, wg.data<float>() + (e + 1) * F * d, w_gu.data<float>() + e * 2 * F * d);
      std::copy(wu.data<float>() + e * F * d, wu.data<float>() + (e + 1) * F * d,
                w_gu.data<float>() + e * 2 * F * d + F * d);
    }
    // forward
    Tensor logits = poisoned({N, E});
    ops::linear_forward(logits, x, gate_w, Tensor());
    Tensor ids = poisoned_ints({N, k}), w = poisoned({N, k}), counts = poisoned_ints({E});
    ops::moe_router_forward(ids, w, counts, logits, bias, r);
    expect_equal_ints(ids, c.i32("expert_ids"), c.at + " expert_ids");
    Tensor offsets = poisoned_ints({E + 1}), row_of = poisoned_ints({N, k}), slot_of = poisoned_ints({R});
    ops::moe_permute_map(offsets, row_of, slot_of, ids);
    Tensor xs = poisoned({R, d}), gu = poisoned({R, 2 * F}), h = poisoned({R, F}), out = poisoned({R, d});
    ops::moe_permute(xs, x, slot_of, k);
    ops::moe_grouped_linear_forward(gu, xs, w_gu, offsets);
    ops::swiglu_forward(h, gu);
    ops::moe_grouped_linear_forward(out, h, wd, offsets);
    Tensor y = poisoned({N, d});
    ops::moe_unpermute(y, out, w, row_of);
    EXPECT_CLOSE(y, c.read64("y"), "y");
    // backward
    Tensor d_out = poisoned({R, d}), d_w = poisoned({N, k});
    ops::moe_unpermute_backward(d_out, d_w, dy, out, w, row_of);
    Tensor dh = poisoned({R, F}), dwd = poisoned({E, d, F}), dgu = poisoned({R, 2 * F}), dw_gu = poisoned({E, 2 * F, d});
    ops::moe_grouped_linear_backward_input(dh, d_out, wd, offsets);
    ops::moe_grouped_linear_backward_weight(dwd, d_out, h, offsets, false);
    ops::swiglu_backward(dgu, dh, gu);
    ops::moe_grouped_linear_backward_weight(dw_gu, dgu, xs, offsets, false);
    Tensor dxs = poisoned({R, d}), dx = poisoned({N, d});
    ops::moe_grouped_linear_backward_input(dxs, dgu, w_gu, offsets);
    ops::moe_permute_backward(dx, dxs, row_of);
    Tensor d_logits = poisoned({N, E}), d_gate_w = poisoned({E, d});
    ops::moe_router_backward(d_logits, d_w, logits, ids, r);
    ops::linear_backward_input(dx, d_logits, gate_w, /*accumulate=*/true);
    ops::linear_backward_weight(d_gate_w, nullptr, d_logits, x, false);
    EXPECT_CLOSE(dx, c.read64("dx"), "dx");
    EXPECT_CLOSE(d_gate_w, c.read64("d_gate_w"), "d gate weight");
    EXPECT_CLOSE(dwd, c.read64("d_w_down"), "d down_proj");
    // dw_gu [E, 2F, d] against d gate_proj | d up_proj
    std::vector<double> want;
    const std::vector<double> dg = c.read64("d_w_gate"), du = c.read64("d_w_up");
    for (int64_t e = 0; e < E; ++e) {
      want.insert(want.end(), dg.begin() + e * F * d, dg.begin() + (e + 1) * F * d);
      want.insert(want.end(), du.begin() + e * F * d, du.begin() + (e + 1) * F * d);
    }
    EXPECT_CLOSE(dw_gu, want, "d gate_proj | up_proj");
  }
}

}  // namespace
}  // namespace tetra::test
