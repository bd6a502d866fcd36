// CPU router of DeepSeek-V3's mixture of experts (runtime/ops.h): per token, sigmoid scores, choice
// by the biased scores with group limiting, Hugging Face's weight normalisation; its backward
// through the normalisation and the sigmoid (plus the sequence-wise balance loss's term); the
// balance loss; the balancing bias step. The scalar rules are those of runtime/moe_router_math.h,
// which the CUDA kernels share.
// Shapes: logits [N, E] fp32, bias [E], expert_ids int32 [N, k], weights [N, k], counts/load int32 [E],
// d_prob_sums [B, E] (B = N / T sequences).
#include <vector>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/kernel_util.h"
#include "runtime/moe_router_math.h"
#include "runtime/moe_shape.h"

namespace tetra::cpu {

namespace {

// The k experts of one token, best first: c holds the choice scores s + b (E values) and is
// overwritten with the group-masked scores.
void choose_experts(float* c, int64_t E, const ops::MoeRouting& r, int32_t* ids) {
  if (r.n_group > 1) {
    const int64_t gsize = E / r.n_group;
    std::vector<float> group_score(static_cast<size_t>(r.n_group));
    for (int64_t g = 0; g < r.n_group; ++g) {
      // The two largest values of the group (a repeated maximum counts twice, as topk(2) does).
      int32_t first = -1;
      for (int64_t e = g * gsize; e < (g + 1) * gsize; ++e)
        if (first < 0 || moe_chosen_before(c[e], static_cast<int32_t>(e), c[first], first)) first = static_cast<int32_t>(e);
      int32_t second = -1;
      for (int64_t e = g * gsize; e < (g + 1) * gsize; ++e)
        if (e != first && (second < 0 || moe_chosen_before(c[e], static_cast<int32_t>(e), c[second], second)))
          second = static_cast<int32_t>(e);
      group_score[static_cast<size_t>(g)] = c[first] + c[second];
    }
    std::vector<char> eligible(static_cast<size_t>(r.n_group), 0);
    for (int64_t pick = 0; pick < r.topk_group; ++pick) {
      int32_t best = -1;
      for (int32_t g = 0; g < r.n_group; ++g)
        if (!eligible[static_cast<size_t>(g)] &&
            (best < 0 || moe_chosen_before(group_score[static_cast<size_t>(g)], g, group_score[static_cast<size_t>(best)], best)))
          best = g;
      eligible[static_cast<size_t>(best)] = 1;
    }
    for (int64_t e = 0; e < E; ++e)
      if (!eligible[static_cast<size_t>(e / gsize)]) c[e] = 0.0f;  // Hugging Face's masked_fill(…, 0.0)
  }
  std::vector<char> taken(static_cast<size_t>(E), 0);
  for (int64_t j = 0; j < r.top_k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < E; ++e)
      if (!taken[static_cast<size_t>(e)] && (best < 0 || moe_chosen_before(c[e], e, c[best], best))) best = e;
    taken[static_cast<size_t>(best)] = 1;
    ids[j] = best;
  }
}

}  // namespace

void moe_router_forward(Tensor& expert_ids, Tensor& weights, Tensor& counts, const Tensor& logits, const Tensor& bias,
                        const ops::MoeRouting& routing, Tensor* load) {
  const MoeRouterDims d =
      check_moe_router_forward("moe_router_forward", expert_ids, weights, counts, logits, bias, routing, load);
  const int64_t N = d.N, E = d.E, k = d.k;
  const float* pl = logits.data<float>();
  const float* pb = bias.data<float>();
  int32_t* pid = expert_ids.data<int32_t>();
  float* pw = weights.data<float>();
  int32_t* pc = counts.data<int32_t>();
  for (int64_t e = 0; e < E; ++e) pc[e] = 0;
  std::vector<float> s(static_cast<size_t>(E)), c(static_cast<size_t>(E)), chosen(static_cast<size_t>(k));
  for (int64_t n = 0; n < N; ++n) {
    const float* l = pl + n * E;
    for (int64_t e = 0; e < E; ++e) {
      s[static_cast<size_t>(e)] = moe_sigmoid(l[e]);
      c[static_cast<size_t>(e)] = s[static_cast<size_t>(e)] + pb[e];
    }
    int32_t* ids = pid + n * k;
    if (routing.force_balance) {
      for (int64_t j = 0; j < k; ++j) ids[j] = static_cast<int32_t>((n * k + j) % E);
    } else {
      choose_experts(c.data(), E, routing, ids);
    }
    for (int64_t j = 0; j < k; ++j) {
      chosen[static_cast<size_t>(j)] = s[static_cast<size_t>(ids[j])];
      ++pc[ids[j]];
    }
    const float den = moe_weight_denominator(chosen.data(), k);
    for (int64_t j = 0; j < k; ++j) pw[n * k + j] = moe_weight(chosen[static_cast<size_t>(j)], den, routing.route_scale);
  }
  if (given(load)) {
    int32_t* pload = load->data<int32_t>();
    for (int64_t e = 0; e < E; ++e) pload[e] += pc[e];
  }
}

void moe_router_backward(Tensor& d_logits, const Tensor& d_weights, const Tensor& logits, const Tensor& expert_ids,
                         const ops::MoeRouting& routing, const Tensor* d_prob_sums, bool accumulate) {
  const char* op = "moe_router_backward";
  int64_t T = 0;
  const MoeRouterDims d =
      check_moe_router_backward(op, d_logits, d_weights, logits, expert_ids, routing, d_prob_sums, &T);
  check_dtype(op, "d_logits", d_logits, DType::F32);
  const int64_t N = d.N, E = d.E, k = d.k;
  const float* pl = logits.data<float>();
  const float* pdw = d_weights.data<float>();
  const int32_t* pid = expert_ids.data<int32_t>();
  const float* pg = T > 0 ? d_prob_sums->data<float>() : nullptr;
  float* pd = d_logits.data<float>();
  std::vector<float> s(static_cast<size_t>(E)), ds(static_cast<size_t>(E)), chosen(static_cast<size_t>(k));
  for (int64_t n = 0; n < N; ++n) {
    const float* l = pl + n * E;
    const int32_t* ids = pid + n * k;
    const float* dw = pdw + n * k;
    for (int64_t e = 0; e < E; ++e) {
      s[static_cast<size_t>(e)] = moe_sigmoid(l[e]);
      ds[static_cast<size_t>(e)] = 0.0f;
    }
    for (int64_t j = 0; j < k; ++j) {
      if (ids[j] < 0 || ids[j] >= E)
        TETRA_FAIL(Internal, op, ": expert_ids[", n, ", ", j, "] = ", ids[j], " is not an expert of E = ", E);
      chosen[static_cast<size_t>(j)] = s[static_cast<size_t>(ids[j])];
    }
    // Through w_j = route_scale · s_j / D:  ds_j = route_scale/D · (dw_j − Σ_l dw_l·s_l/D).
    const float den = moe_weight_denominator(chosen.data(), k);
    float dot = 0.0f;
    for (int64_t j = 0; j < k; ++j) dot += dw[j] * (chosen[static_cast<size_t>(j)] / den);
    for (int64_t j = 0; j < k; ++j) ds[static_cast<size_t>(ids[j])] += routing.route_scale / den * (dw[j] - dot);
    if (pg) {  // through P = Σ_t s_i / S:  ds_i += (g_i − Σ_e g_e·s_e/S) / S
      const float* g = pg + (n / T) * E;
      float S = 0.0f, gs = 0.0f;
      for (int64_t e = 0; e < E; ++e) S += s[static_cast<size_t>(e)];
      for (int64_t e = 0; e < E; ++e) gs += g[e] * s[static_cast<size_t>(e)];
      gs /= S;
      for (int64_t e = 0; e < E; ++e) ds[static_cast<size_t>(e)] += (g[e] - gs) / S;
    }
    float* out = pd + n * E;
    for (int64_t e = 0; e < E; ++e) {
      const float se = s[static_cast<size_t>(e)];
      const float v = ds[static_cast<size_t>(e)] * se * (1.0f - se);
      out[e] = accumulate ? out[e] + v : v;
    }
  }
}

void moe_balance_loss(Tensor& loss_sum, Tensor& d_prob_sums, const Tensor& logits, const Tensor& expert_ids,
                      int64_t seq_len, float loss_scale, float grad_scale) {
  const char* op = "moe_balance_loss";
  const int64_t B = check_moe_balance_loss(op, loss_sum, d_prob_sums, logits, expert_ids, seq_len);
  const int64_t E = logits.dim(1), k = expert_ids.dim(1), T = seq_len;
  const float* pl = logits.data<float>();
  const int32_t* pid = expert_ids.data<int32_t>();
  float* pg = d_prob_sums.data<float>();
  // f = E/(k·T) · count, P = Σ_t s'/T:  Σ_i f_i·P_i = E/(k·T²) · Σ_i count_i · Σ_t s'_{t,i}.
  const double f_per_slot = static_cast<double>(E) / (static_cast<double>(k) * static_cast<double>(T));
  std::vector<double> p(static_cast<size_t>(E));
  std::vector<int64_t> count(static_cast<size_t>(E));
  std::vector<float> s(static_cast<size_t>(E));
  double total = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    std::fill(p.begin(), p.end(), 0.0);
    std::fill(count.begin(), count.end(), 0);
    for (int64_t t = b * T; t < (b + 1) * T; ++t) {
      double S = 0.0;
      for (int64_t e = 0; e < E; ++e) {
        s[static_cast<size_t>(e)] = moe_sigmoid(pl[t * E + e]);
        S += s[static_cast<size_t>(e)];
      }
      for (int64_t e = 0; e < E; ++e) p[static_cast<size_t>(e)] += s[static_cast<size_t>(e)] / S;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t id = pid[t * k + j];
        if (id < 0 || id >= E) TETRA_FAIL(Internal, op, ": expert_ids[", t, ", ", j, "] = ", id, " is not an expert of E = ", E);
        ++count[static_cast<size_t>(id)];
      }
    }
    for (int64_t e = 0; e < E; ++e) {
      const double f = f_per_slot * static_cast<double>(count[static_cast<size_t>(e)]);
      total += f * p[static_cast<size_t>(e)] / static_cast<double>(T);
      pg[b * E + e] = static_cast<float>(static_cast<double>(grad_scale) * f / static_cast<double>(T));
    }
  }
  loss_sum.data<double>()[0] += static_cast<double>(loss_scale) * total;
}

void moe_bias_update(Tensor& bias, const Tensor& load, float rate, const Tensor* control) {
  check_moe_bias_update("moe_bias_update", bias, load, control);
  if (control && control->data<double>()[kCtlSkipped] != 0.0) return;  // a skipped step changes nothing
  const int64_t E = bias.numel();
  const int32_t* pl = load.data<int32_t>();
  float* pb = bias.data<float>();
  double sum = 0.0;
  for (int64_t e = 0; e < E; ++e) sum += pl[e];
  const double mean = sum / static_cast<double>(E);
  for (int64_t e = 0; e < E; ++e) pb[e] += moe_bias_step(pl[e], mean, rate);
}

}  // namespace tetra::cpu
