#include "models/generation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "models/kv_cache.h"
#include "runtime/ops.h"
#include "runtime/stream.h"

namespace tetra {

namespace {

// One pass of `ids` (one sequence) through every layer from ctx.position; the logits [T, V] stay on
// the device in ctx.logits.
void forward_pass(Model& model, MicroBatchContext& ctx, const std::vector<int32_t>& ids) {
  const int64_t T = static_cast<int64_t>(ids.size());
  Tensor host = Tensor::from_vector(ids, {1, T});
  ctx.ids = ctx.device().is_cpu() ? host : Tensor::empty({1, T}, DType::I32, ctx.device());
  if (!ctx.device().is_cpu()) ops::copy(ctx.ids, host);
  ctx.batch = 1;
  ctx.seq_len = T;
  ctx.training = false;
  ctx.targets = Tensor();
  ctx.logits = Tensor();
  Tensor x = ctx.ids;
  for (Layer* layer : model.layers()) x = layer->forward(ctx, x);
  TETRA_CHECK(ctx.logits.defined() && ctx.logits.dim(0) == T, "generate: the output layer wrote no logits");
}

// Row `row` of ctx.logits as fp32 on the host.
std::vector<float> logits_row(const MicroBatchContext& ctx, int64_t row) {
  const int64_t V = ctx.logits.dim(1);
  Tensor host = Tensor::empty({V}, DType::F32);
  ops::copy(host, ctx.logits.slice_flat(row * V, {V}));
  device_synchronize(ctx.device());
  return std::vector<float>(host.data<float>(), host.data<float>() + V);
}

}  // namespace

int32_t next_token(const float* logits, int64_t vocab, const Sampling& s, std::mt19937_64& rng) {
  TETRA_CHECK(vocab > 0, "next_token: empty vocabulary");
  if (s.greedy || s.top_k == 1) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  TETRA_CHECK(s.temperature > 0 && s.top_p > 0 && s.top_p <= 1 && s.top_k >= 0, "next_token: temperature ",
              s.temperature, ", top_p ", s.top_p, ", top_k ", s.top_k);
  // Candidates by decreasing logit (ties: lower id first), then top-k, then top-p over the softmax.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = s.top_k > 0 ? std::min<size_t>(order.size(), static_cast<size_t>(s.top_k)) : order.size();
  std::vector<double> p(keep);
  const double top = logits[order[0]] / s.temperature;
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp(logits[order[i]] / s.temperature - top);
  if (s.top_p < 1) {
    // transformers' TopPLogitsWarper: drop the tokens whose cumulative probability, counted from
    // the least likely, is ≤ 1 − top_p; that keeps the fewest most likely tokens reaching top_p.
    double tail = 0;
    size_t cut = keep;
    while (cut > 1 && (tail + p[cut - 1]) / sum <= 1 - s.top_p) tail += p[--cut];
    keep = cut;
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i];
  double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  for (size_t i = 0; i < keep; ++i) {
    if (u < p[i]) return order[i];
    u -= p[i];
  }
  return order[keep - 1];
}

std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, int64_t max_length,
                              const GenerationOptions& options, Device device, DType dtype,
                              const std::function<void(int32_t)>& on_token) {
  const int64_t P = static_cast<int64_t>(prompt.size());
  if (P == 0) TETRA_FAIL(Usage, "the prompt has no tokens");
  if (P >= max_length)
    TETRA_FAIL(Usage, "the prompt has ", P, " tokens; the model takes ", max_length,
               " in all (model.seq_len), leaving none to generate");
  const int64_t total = std::min(max_length, P + options.max_new_tokens);
  KvCache cache(1, total, dtype, device);
  MicroBatchContext ctx(device, dtype);
  ctx.kv_cache = &cache;
  std::mt19937_64 rng(options.sampling.seed);
  std::vector<int32_t> out, pass = prompt;
  while (P + static_cast<int64_t>(out.size()) < total) {
    ctx.position = cache.length();
    forward_pass(model, ctx, pass);
    cache.advance(static_cast<int64_t>(pass.size()));
    const std::vector<float> row = logits_row(ctx, static_cast<int64_t>(pass.size()) - 1);
    const int32_t id = next_token(row.data(), static_cast<int64_t>(row.size()), options.sampling, rng);
    out.push_back(id);
    if (on_token) on_token(id);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), id) != options.stop_ids.end()) break;
    pass = {id};
  }
  return out;
}

Tensor full_logits(Model& model, const std::vector<int32_t>& ids, Device device, DType dtype) {
  MicroBatchContext ctx(device, dtype);
  forward_pass(model, ctx, ids);
  const int64_t T = ctx.logits.dim(0), V = ctx.logits.dim(1);
  Tensor host = Tensor::empty({T, V}, DType::F32);
  ops::copy(host, ctx.logits);
  device_synchronize(device);
  return host;
}

}  // namespace tetra
