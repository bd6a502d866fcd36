// Tensor parallelism without MPI: parameter placement (boxes of the full tensor, element runs, the
// per-part split of fused weights), initialisation of a slice from the same full tensor, the ZeRO
// layout's tp-reduced tail, the GPT-2 plan applied to a model, the vocabulary-parallel embedding and
// loss (CPU) against the unsplit ops, and checkpoint pieces as boxes read back at other splits.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>

#include <unistd.h>

#include "launch/checkpoint/checksum.h"
#include "launch/checkpoint/files.h"
#include "launch/checkpoint/meta.h"
#include "launch/checkpoint/reader.h"
#include "launch/checkpoint/shard.h"
#include "models/gpt_family.h"
#include "models/model_family.h"
#include "models/tensor_parallel_plan.h"
#include "parallel/distributed_optimizer.h"
#include "parallel/param_placement.h"
#include "parallel/param_set.h"
#include "parallel/zero/layout.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/runtime/op_test_util.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

Param make(const std::string& name, Shape shape, int layer = 0) {
  Param p;
  p.name = name;
  p.full_shape = p.local_shape = shape;
  p.layer_index = layer;
  return p;
}

// A fused [q | k | v] weight of `heads` heads of `d` rows each per part, `in` columns.
Param fused_qkv(int64_t heads, int64_t d, int64_t in) {
  const int64_t C = heads * d;
  Param p = make("attn.c_attn.weight", {3 * C, in});
  p.parts = {{"", 0, C, d}, {"", C, C, d}, {"", 2 * C, C, d}};
  return p;
}

// A Llama-style fused [q | k | v] weight: `heads` query heads and `kv` key/value heads of `d` rows.
Param gqa_qkv(int64_t heads, int64_t kv, int64_t d, int64_t in) {
  Param p = make("self_attn.qkv_proj.weight", {(heads + 2 * kv) * d, in});
  p.parts = {{"q_proj.weight", 0, heads * d, d}, {"k_proj.weight", heads * d, kv * d, d},
             {"v_proj.weight", (heads + kv) * d, kv * d, d}};
  return p;
}

// Row-major values i of a full tensor, as fp32.
Tensor iota(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

TEST(ParamPlacement, ColumnSplitIsOneBoxOfRows) {
  Param p = make("w", {8, 4});
  shard_over_tp(p, 0, 2, 1);
  EXPECT_EQ(p.local_shape, (Shape{4, 4}));
  EXPECT_TRUE(p.placement.tp.sharded());
  const auto boxes = local_boxes(p);
  ASSERT_EQ(boxes.size(), 1u);
  EXPECT_EQ(boxes[0].box.offset, (Shape{4, 0}));
  EXPECT_EQ(boxes[0].box.shape, (Shape{4, 4}));
  const auto runs = local_runs(p);
  ASSERT_EQ(runs.size(), 1u);  // whole rows: one contiguous run
  EXPECT_EQ(runs[0].local, 0);
  EXPECT_EQ(runs[0].full, 16);
  EXPECT_EQ(runs[0].length, 16);
}

TEST(ParamPlacement, RowSplitIsOneRunPerRow) {
  Param p = make("w", {3, 6});
  shard_over_tp(p, 1, 3, 2);
  EXPECT_EQ(p.local_shape, (Shape{3, 2}));
  const auto runs = local_runs(p);
  ASSERT_EQ(runs.size(), 3u);
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(runs[static_cast<size_t>(r)].local, 2 * r);
    EXPECT_EQ(runs[static_cast<size_t>(r)].full, 6 * r + 4);
    EXPECT_EQ(runs[static_cast<size_t>(r)].length, 2);
  }
  Tensor piece = local_piece(p, iota({3, 6}));
  const std::vector<float> want{4, 5, 10, 11, 16, 17};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(piece.data<float>()[i], want[i]);
}

TEST(ParamPlacement, FusedWeightSplitsEachPartInWholeHeads) {
  // 4 heads of 2 rows per part; tp = 2: rank 1 holds heads 2-3 of q, of k and of v.
  Param p = fused_qkv(4, 2, 3);
  shard_over_tp(p, 0, 2, 1);
  EXPECT_EQ(p.local_shape, (Shape{12, 3}));
  const auto boxes = local_boxes(p);
  ASSERT_EQ(boxes.size(), 3u);
  for (int part = 0; part < 3; ++part) {
    EXPECT_EQ(boxes[static_cast<size_t>(part)].box.offset, (Shape{8 * part + 4, 0}));
    EXPECT_EQ(boxes[static_cast<size_t>(part)].box.shape, (Shape{4, 3}));
    EXPECT_EQ(boxes[static_cast<size_t>(part)].local_row, 4 * part);
  }
  // A flat range of the local tensor across the q/k boundary: two box ranges.
  const auto ranges = box_ranges(p, 10, 14);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].box.offset, (Shape{4, 0}));
  EXPECT_EQ(ranges[0].begin, 10);
  EXPECT_EQ(ranges[0].end, 12);
  EXPECT_EQ(ranges[0].local_begin, 10);
  EXPECT_EQ(ranges[1].box.offset, (Shape{12, 0}));
  EXPECT_EQ(ranges[1].begin, 0);
  EXPECT_EQ(ranges[1].end, 2);
  EXPECT_EQ(ranges[1].local_begin, 12);
  // 3 heads per part do not split over 2 ranks; 4 rows in units of 2 over tp = 4 do not either.
  Param odd = fused_qkv(3, 2, 3);
  EXPECT_NE(error_of([&] { shard_over_tp(odd, 0, 2, 0); }).find("which do not split over tp = 2"), std::string::npos);
  Param plain = make("w", {5, 4});
  EXPECT_NE(error_of([&] { shard_over_tp(plain, 0, 2, 0); }).find("does not split over tp = 2"), std::string::npos);
}

// Key/value parts of fewer heads than tp ranks (tp a multiple of them) are replicated: rank t holds
// query heads [t·H/tp, ...) and key/value head t / (tp / Hkv); the blocks several ranks hold count
// once (on the first of them), and their gradients are summed over exactly those ranks.
TEST(ParamPlacement, PartsOfFewerHeadsThanRanksAreReplicated) {
  // 4 query heads, 2 key/value heads of 2 rows, 3 columns, at tp 4: kv head t / 2 on rank t.
  for (int rank = 0; rank < 4; ++rank) {
    Param p = gqa_qkv(4, 2, 2, 3);
    shard_over_tp(p, 0, 4, rank, /*replicate_parts=*/true);
    EXPECT_EQ(p.placement.tp.part_replicas, (std::vector<int>{1, 2, 2}));
    EXPECT_EQ(p.local_shape, (Shape{6, 3}));
    const auto boxes = local_boxes(p);
    ASSERT_EQ(boxes.size(), 3u);
    EXPECT_EQ(boxes[0].box.offset[0], 2 * rank);             // query head `rank`
    EXPECT_EQ(boxes[1].box.offset[0], 8 + 2 * (rank / 2));   // key head rank / 2
    EXPECT_EQ(boxes[2].box.offset[0], 12 + 2 * (rank / 2));  // value head rank / 2
    EXPECT_EQ(boxes[2].local_row, 4);
    const auto rep = replica_ranges(p);
    ASSERT_EQ(rep.size(), 1u);  // k and v blocks: one range of the local tensor
    EXPECT_EQ(rep[0].begin, 6);
    EXPECT_EQ(rep[0].end, 18);
    EXPECT_EQ(rep[0].replicas, 2);
    EXPECT_TRUE(counted_here(p));
    using Ranges = std::vector<std::pair<int64_t, int64_t>>;
    EXPECT_EQ(counted_ranges(p), rank % 2 == 0 ? (Ranges{{0, 18}}) : (Ranges{{0, 6}})) << "rank " << rank;
  }
  // One key/value head (multi-query) at tp 2: held by both ranks.
  Param mqa = gqa_qkv(4, 1, 2, 3);
  shard_over_tp(mqa, 0, 2, 1, true);
  EXPECT_EQ(mqa.local_shape, (Shape{8, 3}));
  EXPECT_EQ(local_boxes(mqa)[1].box.offset[0], 8);
  EXPECT_EQ(replica_ranges(mqa)[0].replicas, 2);
  // Parts that split need no replicas; tp neither dividing nor a multiple of the heads is refused,
  // as is replication where the plan does not ask for it.
  Param split = gqa_qkv(4, 2, 2, 3);
  shard_over_tp(split, 0, 2, 1, true);
  EXPECT_TRUE(split.placement.tp.part_replicas.empty());
  EXPECT_TRUE(replica_ranges(split).empty());
  Param odd = gqa_qkv(6, 2, 2, 3);
  EXPECT_NE(error_of([&] { shard_over_tp(odd, 0, 3, 0, true); }).find("nor is tp a multiple of them"),
            std::string::npos);
  Param plain = gqa_qkv(4, 2, 2, 3);
  EXPECT_NE(error_of([&] { shard_over_tp(plain, 0, 4, 0); }).find("which do not split over tp = 4"), std::string::npos);
  EXPECT_EQ(part_replicas_for(2, 4, true), 2);
  EXPECT_EQ(part_replicas_for(2, 4, false), 0);
  EXPECT_EQ(part_replicas_for(4, 2, true), 1);
  EXPECT_EQ(part_replicas_for(2, 3, true), 0);
}

TEST(ParamPlacement, CountedOnceAndReducedOverTp) {
  Param shard = make("w", {4, 4});
  shard_over_tp(shard, 1, 2, 1);
  Param norm = make("ln.weight", {4});
  replicate_over_tp(norm, 2, 1, /*grad_over_tp=*/true);
  Param norm0 = make("ln.bias", {4});
  replicate_over_tp(norm0, 2, 0, /*grad_over_tp=*/true);
  EXPECT_TRUE(counted_here(shard));
  EXPECT_FALSE(counted_here(norm));  // tp rank 1's copy of a replicated weight
  EXPECT_TRUE(counted_here(norm0));
  EXPECT_EQ(grad_reduce_axes(norm), (std::vector<MeshAxis>{MeshAxis::DP, MeshAxis::TP}));
  EXPECT_EQ(grad_reduce_axes(shard), (std::vector<MeshAxis>{MeshAxis::DP}));
  Param one = make("x", {4});
  replicate_over_tp(one, 1, 0, /*grad_over_tp=*/true);
  EXPECT_FALSE(one.placement.grad_over_tp);  // nothing to sum over a group of one
}

// Every layout draws its slice of the same full tensor: the split parameters' values equal the
// unsplit parameter's values at the slices' elements.
TEST(ParamPlacement, InitialisationDrawsTheSliceOfTheFullTensor) {
  for (int dim : {0, 1, 2}) {  // 2: dim 0 with replicated key/value heads (1 head over 2 ranks)
    Param whole = dim == 0 ? fused_qkv(4, 2, 6) : dim == 1 ? make("attn.c_attn.weight", {24, 6}) : gqa_qkv(4, 1, 2, 6);
    whole.init_std = 0.5f;
    ParamSet full;
    full.build({&whole}, Device::cpu(), DType::F32, DType::F32);
    full.initialize(99);
    for (int r = 0; r < 2; ++r) {
      Param part = whole;
      part.value = part.grad = Tensor();
      shard_over_tp(part, dim % 2, 2, r, /*replicate_parts=*/dim == 2);
      ParamSet set;
      set.build({&part}, Device::cpu(), DType::F32, DType::F32);
      set.initialize(99);
      Tensor want = local_piece(part, whole.value);
      ASSERT_EQ(part.value.numel(), want.numel());
      for (int64_t i = 0; i < want.numel(); ++i)
        ASSERT_EQ(part.value.data<float>()[i], want.data<float>()[i]) << "dim " << dim << " rank " << r << " at " << i;
    }
  }
}

TEST(ZeroLayoutTp, SequenceParallelWeightsGoLastInTheirUnit) {
  Param ln = make("ln.weight", {8}, 1), w = make("w", {8, 8}, 1), b = make("b", {8}, 1), e = make("e", {4, 8}, 0);
  replicate_over_tp(ln, 2, 0, true);
  shard_over_tp(w, 0, 2, 0);
  shard_over_tp(b, 0, 2, 0);
  ZeroLayout layout({&e, &ln, &w, &b}, 1, 4);
  ASSERT_EQ(layout.units().size(), 2u);
  EXPECT_FALSE(layout.units()[0].has_tp_reduced());
  const ZeroUnit& u = layout.units()[1];
  ASSERT_TRUE(u.has_tp_reduced());
  EXPECT_EQ(layout.params()[static_cast<size_t>(u.params.back())]->name, "ln.weight");
  EXPECT_EQ(u.tp_reduced_begin, layout.offset_of(u.params.back()) - u.offset);
  // Without tensor parallelism the model's order stays.
  Param ln1 = make("ln.weight", {8}, 1), w1 = make("w", {8, 8}, 1);
  ZeroLayout plain({&ln1, &w1}, 1, 4);
  EXPECT_EQ(plain.params()[0]->name, "ln.weight");
  EXPECT_FALSE(plain.units()[0].has_tp_reduced());
  EXPECT_TRUE(plain.units()[0].tp_replicated.empty());
}

// The replicated key/value blocks of a unit are listed as ranges of the unit, with their replicas.
TEST(ZeroLayoutTp, ReplicatedBlocksAreListedPerUnit) {
  Param ln = make("ln.weight", {3}, 0), qkv = gqa_qkv(4, 1, 2, 3), o = make("o.weight", {3, 8}, 0);
  replicate_over_tp(ln, 4, 1, true);
  shard_over_tp(qkv, 0, 4, 1, true);  // q rows [2, 4), the k and v heads whole: 6 rows of 3
  shard_over_tp(o, 1, 4, 1);
  ZeroLayout layout({&ln, &qkv, &o}, 2, 4);
  ASSERT_EQ(layout.units().size(), 1u);
  const ZeroUnit& u = layout.units()[0];
  ASSERT_EQ(u.tp_replicated.size(), 1u);
  const int64_t at = layout.offset_of(0) - u.offset;  // qkv is the unit's first parameter
  EXPECT_EQ(layout.params()[0]->name, qkv.name);
  EXPECT_EQ(u.tp_replicated[0].begin, at + 6);
  EXPECT_EQ(u.tp_replicated[0].end, at + 18);
  EXPECT_EQ(u.tp_replicated[0].replicas, 4);
}

// GPT-2's plan: c_attn per head of q, k, v; c_fc by rows; both c_proj by columns; the tied wte by
// vocabulary; norms, positions and the row-parallel biases whole, summed over tp with sequence
// parallelism only.
TEST(TensorParallelPlan, Gpt2PlacesEveryParameter) {
  ModelArgs a{.vocab_size = 64, .seq_len = 16, .d_model = 32, .n_layers = 2, .n_heads = 4};
  for (bool sp : {true, false}) {
    auto model = gpt_family().build(a);
    apply_tensor_parallel_plan(gpt_family().tensor_parallel_plan(a), *model, 2, 1, sp);
    std::map<std::string, Param*> byname;
    for (Param* p : model->params()) byname[p->name] = p;
    EXPECT_EQ(byname["transformer.wte.weight"]->local_shape, (Shape{32, 32}));
    EXPECT_EQ(byname["transformer.h.0.attn.c_attn.weight"]->local_shape, (Shape{48, 32}));
    EXPECT_EQ(local_boxes(*byname["transformer.h.0.attn.c_attn.weight"]).size(), 3u);
    EXPECT_EQ(byname["transformer.h.0.attn.c_attn.bias"]->local_shape, (Shape{48}));
    EXPECT_EQ(byname["transformer.h.1.mlp.c_fc.weight"]->local_shape, (Shape{64, 32}));
    EXPECT_EQ(byname["transformer.h.1.mlp.c_proj.weight"]->local_shape, (Shape{32, 64}));
    EXPECT_EQ(byname["transformer.h.1.attn.c_proj.weight"]->local_shape, (Shape{32, 16}));
    for (const char* whole : {"transformer.wpe.weight", "transformer.h.0.ln_1.weight", "transformer.h.1.attn.c_proj.bias",
                              "transformer.ln_f.bias"}) {
      EXPECT_EQ(byname[whole]->local_shape, byname[whole]->full_shape) << whole;
      EXPECT_EQ(byname[whole]->placement.grad_over_tp, sp) << whole;
      EXPECT_FALSE(counted_here(*byname[whole])) << whole;  // rank 1
    }
  }
  // 4 heads over tp = 8: a Config error naming parallel.tp and the parameter.
  auto model = gpt_family().build(a);
  const std::string e = error_of([&] { apply_tensor_parallel_plan(gpt_family().tensor_parallel_plan(a), *model, 8, 0, true); });
  EXPECT_NE(e.find("parallel.tp"), std::string::npos) << e;
  EXPECT_NE(e.find("c_attn.weight"), std::string::npos) << e;
}

// Llama's plan: q, k and v each split in whole heads (grouped-query: 8 query heads over 4 key/value
// heads at tp 2 — 4 query and 2 key/value heads a rank), gate and up each in halves, the untied
// lm_head by vocabulary; tp beyond the key/value heads refused naming model.n_kv_heads.
TEST(TensorParallelPlan, LlamaSplitsHeadsAndHalves) {
  ModelArgs a{.arch = "llama", .vocab_size = 64, .seq_len = 16, .d_model = 32, .n_layers = 1, .n_heads = 8,
              .n_kv_heads = 4, .ffn_dim = 24};
  const ModelFamily& llama = model_family("llama");
  auto model = llama.build(a);
  apply_tensor_parallel_plan(llama.tensor_parallel_plan(a), *model, 2, 1, true);
  std::map<std::string, Param*> byname;
  for (Param* p : model->params()) byname[p->name] = p;
  Param& qkv = *byname["model.layers.0.self_attn.qkv_proj.weight"];
  EXPECT_EQ(qkv.local_shape, (Shape{(4 + 2 * 2) * 4, 32}));
  const auto boxes = local_boxes(qkv);
  ASSERT_EQ(boxes.size(), 3u);
  EXPECT_EQ(boxes[0].box.offset[0], 16);  // query heads 4..7
  EXPECT_EQ(boxes[0].box.shape[0], 16);
  EXPECT_EQ(boxes[1].box.offset[0], 32 + 8);  // key/value heads 2..3 of k
  EXPECT_EQ(boxes[2].box.offset[0], 48 + 8);  // and of v
  EXPECT_EQ(byname["model.layers.0.mlp.gate_up_proj.weight"]->local_shape, (Shape{24, 32}));
  EXPECT_EQ(local_boxes(*byname["model.layers.0.mlp.gate_up_proj.weight"])[1].box.offset[0], 24 + 12);
  EXPECT_EQ(byname["model.layers.0.mlp.down_proj.weight"]->local_shape, (Shape{32, 12}));
  EXPECT_EQ(byname["lm_head.weight"]->local_shape, (Shape{32, 32}));
  EXPECT_TRUE(byname["model.norm.weight"]->placement.grad_over_tp);
  // tp 8, twice the key/value heads: one query head a rank, each key/value head on 2 ranks.
  EXPECT_NO_THROW(llama.validate(a, 8));
  auto at8 = llama.build(a);
  apply_tensor_parallel_plan(llama.tensor_parallel_plan(a), *at8, 8, 5, true);
  for (Param* p : at8->params())
    if (p->name == "model.layers.0.self_attn.qkv_proj.weight") {
      EXPECT_EQ(p->local_shape, (Shape{3 * 4, 32}));
      EXPECT_EQ(local_boxes(*p)[0].box.offset[0], 5 * 4);        // query head 5
      EXPECT_EQ(local_boxes(*p)[1].box.offset[0], 32 + 2 * 4);   // reads key/value head 5 / 2 = 2
      EXPECT_EQ(replica_ranges(*p).at(0).replicas, 2);
      EXPECT_EQ(counted_ranges(*p).size(), 1u);  // rank 5: its query head only
    }
  // tp neither dividing nor a multiple of the key/value heads (3 of 6 query heads at tp 2): refused
  // naming both keys, and the plan does not split either.
  ModelArgs b = a;
  b.n_heads = 6;
  b.n_kv_heads = 3;
  b.d_model = 24;
  std::string e;
  try {
    llama.validate(b, 2);
  } catch (const ModelArgsError& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("use tp among 1, 3, 6"), std::string::npos) << e;
  auto odd = llama.build(b);
  EXPECT_FALSE(tensor_parallel_plan_problems(llama.tensor_parallel_plan(b), *odd, 2).empty());
}

// ---- the vocabulary-parallel ops (CPU) against the unsplit ones -----------------------------------

Tensor columns(const Tensor& m, int64_t begin, int64_t n) {
  Tensor out = Tensor::empty({m.dim(0), n}, DType::F32);
  for (int64_t r = 0; r < m.dim(0); ++r)
    std::copy_n(m.data<float>() + r * m.dim(1) + begin, n, out.data<float>() + r * n);
  return out;
}

TEST(VocabParallelOps, LossAndGradientEqualTheUnsplitLoss) {
  Rng rng(3);
  const int64_t N = 9, V = 24;
  Tensor logits = test::random_tensor(rng, {N, V}, 4.0);
  Tensor targets = test::random_ids(rng, {N}, 0, static_cast<int32_t>(V));
  targets.data<int32_t>()[2] = -1;
  Tensor losses = Tensor::empty({N}, DType::F32), d = Tensor::empty({N, V}, DType::F32);
  ops::softmax_cross_entropy(losses, &d, logits, targets, 0.25f);
  for (int tp : {1, 2, 3, 4}) {
    const int64_t Vr = V / tp;
    Tensor all = Tensor::empty({tp, 3, N}, DType::F32);
    for (int r = 0; r < tp; ++r) {
      Tensor st = all.slice_flat(static_cast<int64_t>(r) * 3 * N, {3, N});
      ops::cross_entropy_shard_stats(st, columns(logits, r * Vr, Vr), targets, {r * Vr, V});
    }
    for (int r = 0; r < tp; ++r) {
      Tensor shard = columns(logits, r * Vr, Vr);
      Tensor l = test::poisoned({N});
      ops::cross_entropy_from_stats(l, &shard, shard, targets, {r * Vr, V}, all, 0.25f);  // in place
      EXPECT_LE(test::rel_error(l, losses), 1e-6) << "tp " << tp << " rank " << r;
      EXPECT_EQ(l.data<float>()[2], 0.0f);
      EXPECT_LE(test::rel_error(shard, columns(d, r * Vr, Vr)), 1e-6) << "tp " << tp << " rank " << r;
    }
  }
  // Targets outside the vocabulary are rejected, as by the unsplit loss.
  Tensor bad = Tensor::from_vector(std::vector<int32_t>{0, 24, 1, 2, 3, 4, 5, 6, 7}, {N});
  Tensor st = Tensor::empty({3, N}, DType::F32);
  EXPECT_NE(error_of([&] { ops::cross_entropy_shard_stats(st, columns(logits, 0, 12), bad, {0, V}); })
                .find("outside the vocabulary"),
            std::string::npos);
}

TEST(VocabParallelOps, EmbeddingShardsSumToTheLookup) {
  Rng rng(4);
  const int64_t B = 2, T = 5, V = 12, C = 6;
  Tensor ids = test::random_ids(rng, {B, T}, 0, static_cast<int32_t>(V));
  Tensor wte = test::random_tensor(rng, {V, C}), wpe = test::random_tensor(rng, {T, C});
  Tensor y = Tensor::empty({B, T, C}, DType::F32);
  ops::embedding_forward(y, ids, wte, wpe, T);
  Tensor dy = test::random_tensor(rng, {B, T, C});
  Tensor dwte = Tensor::zeros({V, C}, DType::F32);
  ops::embedding_backward(dwte, nullptr, dy, ids, T);
  for (int tp : {2, 3}) {
    const int64_t Vr = V / tp;
    // Summed in fp32 as the reduction over tp does: one shard's token row plus rank 0's positions
    // (the other terms are zeros) rounds exactly as the unsplit lookup's one addition.
    std::vector<float> sum(static_cast<size_t>(y.numel()), 0.0f);
    for (int r = 0; r < tp; ++r) {
      Tensor rows = wte.slice_flat(r * Vr * C, {Vr, C});
      Tensor part = test::poisoned({B, T, C});
      ops::embedding_forward(part, ids, rows, r == 0 ? wpe : Tensor(), T, {r * Vr, V});
      for (int64_t i = 0; i < part.numel(); ++i) sum[static_cast<size_t>(i)] += part.data<float>()[i];
      Tensor g = Tensor::zeros({Vr, C}, DType::F32);
      ops::embedding_backward(g, nullptr, dy, ids, T, {r * Vr, V});
      EXPECT_EQ(test::rel_error(g, test::to_doubles(dwte.slice_flat(r * Vr * C, {Vr, C}))), 0.0);
    }
    EXPECT_EQ(test::rel_error(test::to_doubles(y), std::vector<double>(sum.begin(), sum.end())), 0.0) << "tp " << tp;
  }
}

// ---- checkpoint pieces as boxes -----------------------------------------------------------------

// The pieces a tp rank of a (tp, dp-shards) layout saves of p (saving: not the copies of replicated
// blocks another rank saves) or loads, each a range of its box, the state values derived from the
// full tensor's element index so every element is recognisable. Parts of fewer heads than tp ranks
// are replicated.
std::vector<StatePiece> pieces_of(Param p, int tp, int rank, int shards, bool saving = false) {
  if (tp > 1) shard_over_tp(p, p.parts.empty() ? 1 : 0, tp, rank, /*replicate_parts=*/true);
  Tensor full = iota(p.full_shape);
  Tensor local = local_piece(p, full);
  std::vector<StatePiece> out;
  const int64_t n = local.numel();
  for (int s = 0; s < shards; ++s) {
    const int64_t b = n * s / shards, e = n * (s + 1) / shards;
    Tensor m = Tensor::from_vector(std::vector<float>(local.data<float>() + b, local.data<float>() + e), {e - b});
    Tensor neg = Tensor::empty({e - b}, DType::F32), sq = Tensor::empty({e - b}, DType::F32);
    for (int64_t i = 0; i < e - b; ++i) {
      neg.data<float>()[i] = -m.data<float>()[i];
      sq.data<float>()[i] = m.data<float>()[i] * 2.0f;
    }
    (saving ? append_saved_state_pieces : append_state_pieces)(out, p, b, e, m, neg, sq);
  }
  return out;
}

std::string write_tp_checkpoint(const std::string& dir, const std::vector<Param>& params, int tp, int shards) {
  using namespace launch;
  fs::remove_all(dir);
  fs::create_directories(dir);
  CheckpointMeta meta;
  meta.world_size = tp;
  meta.tp = tp;
  for (const Param& p : params) meta.params.push_back({p.name, p.full_shape});
  for (int r = 0; r < tp; ++r) {
    std::vector<StatePiece> pieces;
    RankFileInfo info;
    info.file = rank_file_name(r);
    info.rank = r;
    for (const Param& p : params)
      for (StatePiece& s : pieces_of(p, tp, r, shards, /*saving=*/true)) {
        info.pieces.push_back({s.name, s.begin, s.end, s.box});
        pieces.push_back(std::move(s));
      }
    const std::string path = dir + "/" + info.file;
    write_shard(path, ShardHeader{}, pieces);
    FileDigest d = digest_file(path);
    info.bytes = d.bytes;
    info.crc32 = d.crc32;
    meta.files.push_back(info);
  }
  write_file_durably(dir + "/" + kMetaFile, to_json(meta).dump(1));
  return dir;
}

TEST(CheckpointBoxes, AnyTensorParallelSplitReadsBackAtAnyOther) {
  // gqa_qkv: 1 key/value head, replicated over every rank at tp 2 and 4 (written once, by rank 0).
  const std::vector<Param> params = {fused_qkv(4, 2, 6), make("proj.weight", {6, 8}), gqa_qkv(4, 1, 2, 6)};
  const std::string root = (fs::temp_directory_path() / ("tetra_tp_boxes_" + std::to_string(::getpid()))).string();
  for (int tp_saved : {1, 2, 4})
    for (int shards : {1, 3}) {
      const std::string dir =
          write_tp_checkpoint(root + "/tp" + std::to_string(tp_saved) + "_s" + std::to_string(shards), params,
                              tp_saved, shards);
      launch::CheckpointReader reader(dir);
      ASSERT_EQ(reader.verify(), "");
      for (const Param& p : params) {
        Tensor full = reader.full_master(p.name, p.full_shape);
        for (int64_t i = 0; i < full.numel(); ++i)
          ASSERT_EQ(full.data<float>()[i], static_cast<float>(i)) << p.name << " saved at tp " << tp_saved;
        // Loaded at another tp and dp: every piece holds its elements' values.
        for (int tp_load : {1, 2, 4})
          for (int r = 0; r < tp_load; ++r)
            for (StatePiece& want : pieces_of(p, tp_load, r, 2)) {
              StatePiece got = want;
              got.master = test::poisoned({want.end - want.begin});
              got.exp_avg = test::poisoned({want.end - want.begin});
              got.exp_avg_sq = test::poisoned({want.end - want.begin});
              reader.fill(got);
              EXPECT_EQ(test::rel_error(got.master, want.master), 0.0) << p.name << " tp " << tp_saved << " → " << tp_load;
              EXPECT_EQ(test::rel_error(got.exp_avg, want.exp_avg), 0.0);
              EXPECT_EQ(test::rel_error(got.exp_avg_sq, want.exp_avg_sq), 0.0);
            }
      }
    }
  fs::remove_all(root);
}

TEST(CheckpointBoxes, OverlappingBoxesAreRejected) {
  const std::vector<Param> params = {make("proj.weight", {4, 4})};
  const std::string root = (fs::temp_directory_path() / ("tetra_tp_overlap_" + std::to_string(::getpid()))).string();
  std::string dir = write_tp_checkpoint(root + "/ok", params, 2, 1);
  // Rank 1 claims rank 0's box as well: the element counts match no longer, and the boxes overlap.
  launch::CheckpointMeta meta = launch::read_meta(dir);
  meta.files[1].pieces[0].box = meta.files[0].pieces[0].box;
  launch::write_file_durably(dir + "/" + launch::kMetaFile, launch::to_json(meta).dump(1));
  const std::string e = error_of([&] { launch::CheckpointReader r(dir); });
  EXPECT_NE(e.find("'proj.weight' overlap"), std::string::npos) << e;
  fs::remove_all(root);
}

}  // namespace
}  // namespace tetra
