// Generation with a key/value cache (models/generation.h, models/kv_cache.h) on the CPU: the decode
// attention equals the last rows of the training attention; greedy generation with the cache equals
// greedy generation by full recomputation (the argmax of the training forward's logits over the
// whole sequence at every step) for GPT-2, Llama with grouped-query attention and tied Llama; sampling
// is reproducible from its seed, top-k 1 is greedy, and top-k / top-p keep the tokens transformers'
// filters keep.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "models/generation.h"
#include "models/kv_cache.h"
#include "models/model_family.h"
#include "parallel/param_set.h"
#include "runtime/ops.h"
#include "runtime/random.h"

namespace tetra {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  Tensor t = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(rng.normal());
  return t;
}

// ‖a − b‖ / ‖b‖ over `n` values.
double rel_err(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST(AttentionDecode, EqualsTheLastRowsOfAttentionForward) {
  const int64_t B = 2, T = 13, H = 4, Hkv = 2, D = 8, Q = (H + 2 * Hkv) * D;
  Tensor qkv = random_tensor({B, T, Q}, 1);
  for (const auto& [length, Tq] : std::vector<std::pair<int64_t, int64_t>>{{13, 5}, {13, 1}, {9, 1}, {9, 9}, {1, 1}}) {
    // Causal attention over the first `length` rows of each sequence.
    Tensor prefix = Tensor::empty({B, length, Q}, DType::F32);
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(qkv.data<float>() + b * T * Q, length * Q, prefix.data<float>() + b * length * Q);
    Tensor full = Tensor::empty({B, length, H * D}, DType::F32), lse = Tensor::empty({B, H, length}, DType::F32);
    ops::attention_forward(full, lse, prefix, H, Hkv);
    Tensor out = Tensor::empty({B, Tq, H * D}, DType::F32);
    ops::attention_decode(out, qkv, length, H, Hkv);  // the cache: all T rows, `length` of them filled
    for (int64_t b = 0; b < B; ++b) {
      const float* want = full.data<float>() + (b * length + length - Tq) * H * D;
      // fp32 with another summation order (scores one by one instead of a GEMM): ~1e-7 relative.
      EXPECT_LT(rel_err(out.data<float>() + b * Tq * H * D, want, Tq * H * D), 1e-5)
          << "length " << length << " Tq " << Tq << " sequence " << b;
    }
  }
}

struct Built {
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamSet> params;
  int64_t vocab = 0;
};

// A model of `arch` with random weights: the family's init, matrices scaled ×5 so that the logits
// spread over several units (no near-ties for argmax to fall either way on a rounding difference).
Built build(const std::string& arch, bool tie = false) {
  ModelArgs a;
  a.arch = arch;
  a.vocab_size = 64;
  a.seq_len = 32;
  a.d_model = 32;
  a.n_layers = 2;
  a.n_heads = 4;
  a.n_kv_heads = arch == "llama" ? 2 : 0;
  a.ffn_dim = arch == "llama" ? 64 : 0;
  a.tie_embeddings = tie;
  Built m;
  m.model = model_family(arch).build(a);
  m.params = std::make_unique<ParamSet>();
  m.params->build(m.model->params(), Device::cpu(), DType::F32, DType::F32, 1, false);
  m.params->initialize(7);
  for (Param* p : m.model->params())
    if (p->full_shape.size() == 2) ops::scale(p->value, 5.0f);
  m.vocab = a.vocab_size;
  return m;
}

std::vector<int32_t> greedy_by_recomputation(Model& model, std::vector<int32_t> ids, int64_t n) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    Tensor logits = full_logits(model, ids, Device::cpu(), DType::F32);
    const int64_t T = logits.dim(0), V = logits.dim(1);
    const float* last = logits.data<float>() + (T - 1) * V;
    out.push_back(static_cast<int32_t>(std::max_element(last, last + V) - last));
    ids.push_back(out.back());
  }
  return out;
}

const std::vector<int32_t> kPrompt = {5, 17, 42, 3, 60};

class GreedyWithCache : public ::testing::TestWithParam<std::pair<std::string, bool>> {};

TEST_P(GreedyWithCache, EqualsFullRecomputation) {
  const auto& [arch, tie] = GetParam();
  Built m = build(arch, tie);
  GenerationOptions o;
  o.max_new_tokens = 12;
  const std::vector<int32_t> cached = generate(*m.model, kPrompt, 32, o, Device::cpu(), DType::F32);
  const std::vector<int32_t> full = greedy_by_recomputation(*m.model, kPrompt, 12);
  EXPECT_EQ(cached, full);
  // Untied, the random model moves between tokens (a tied one tends to repeat its input's token,
  // the row of the output matrix closest to its own embedding).
  if (!tie) {
    EXPECT_GT(std::set<int32_t>(full.begin(), full.end()).size(), 1u) << "a model that repeats one token";
  }
  // The sequence cannot outgrow model.seq_len: 32 tokens in all.
  o.max_new_tokens = 100;
  EXPECT_EQ(generate(*m.model, kPrompt, 32, o, Device::cpu(), DType::F32).size(), 32u - kPrompt.size());
  // A stop id ends it, included.
  o.max_new_tokens = 12;
  o.stop_ids = {full[3]};
  const std::vector<int32_t> stopped = generate(*m.model, kPrompt, 32, o, Device::cpu(), DType::F32);
  const size_t first = static_cast<size_t>(std::find(full.begin(), full.end(), full[3]) - full.begin());
  EXPECT_EQ(stopped, std::vector<int32_t>(full.begin(), full.begin() + first + 1));
}

INSTANTIATE_TEST_SUITE_P(Families, GreedyWithCache,
                         ::testing::Values(std::make_pair(std::string("gpt2"), false),
                                           std::make_pair(std::string("llama"), false),
                                           std::make_pair(std::string("llama"), true)),
                         [](const auto& p) { return p.param.first + (p.param.second ? "_tied" : ""); });

TEST(Sampling, ReproducibleFromItsSeedAndTopKOneIsGreedy) {
  Built m = build("llama");
  GenerationOptions o;
  o.max_new_tokens = 16;
  const std::vector<int32_t> greedy = generate(*m.model, kPrompt, 32, o, Device::cpu(), DType::F32);
  o.sampling.greedy = false;
  o.sampling.temperature = 1.5;
  o.sampling.seed = 11;
  const std::vector<int32_t> a = generate(*m.model, kPrompt, 32, o, Device::cpu(), DType::F32);
  EXPECT_EQ(a, generate(*m.model, kPrompt, 32, o, Device::cpu(), DType::F32));
  EXPECT_NE(a, greedy) << "at temperature 1.5 sixteen draws that all hit the argmax";
  o.sampling.top_k = 1;
  EXPECT_EQ(generate(*m.model, kPrompt, 32, o, Device::cpu(), DType::F32), greedy);
}

TEST(Sampling, TopKAndTopPKeepWhatTransformersKeeps) {
  // Probabilities ∝ 8, 4, 2, 1, 1 (logits ln of them): top-p 0.5 keeps the first alone (8/16 ≥ 0.5),
  // top-p 0.7 the first two (12/16), top-k 3 the first three.
  const std::vector<float> logits = {std::log(2.f), std::log(8.f), std::log(1.f), std::log(4.f), std::log(1.f)};
  auto seen = [&](const Sampling& s) {
    std::mt19937_64 rng(s.seed);
    std::map<int32_t, int> n;
    for (int i = 0; i < 2000; ++i) ++n[next_token(logits.data(), 5, s, rng)];
    std::vector<int32_t> ids;
    for (const auto& [id, count] : n) ids.push_back(id);
    return ids;
  };
  Sampling s;
  s.greedy = false;
  EXPECT_EQ(seen(s), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  s.top_p = 0.5;
  EXPECT_EQ(seen(s), (std::vector<int32_t>{1}));
  s.top_p = 0.7;
  EXPECT_EQ(seen(s), (std::vector<int32_t>{1, 3}));
  s.top_p = 1;
  s.top_k = 3;
  EXPECT_EQ(seen(s), (std::vector<int32_t>{0, 1, 3}));
  Sampling greedy;
  std::mt19937_64 rng(0);
  EXPECT_EQ(next_token(logits.data(), 5, greedy, rng), 1);
}

}  // namespace
}  // namespace tetra
