// The model-family registry (models/model_family.h): every family's spec agrees with the model it
// builds — parameter count, per-layer costs in model order, FLOPs, activation bytes — and its
// tensor-parallel plan covers every parameter exactly once; shape errors name the config key.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "models/model_family.h"
#include "models/stored_tensors.h"

using namespace tetra;

namespace {

// Small shapes of every registered family (tp 2 divides heads and vocabulary).
std::vector<ModelArgs> sample_args() {
  std::vector<ModelArgs> out;
  ModelArgs g{.arch = "gpt2", .vocab_size = 96, .seq_len = 16, .d_model = 32, .n_layers = 3, .n_heads = 4};
  out.push_back(g);
  // Llama: grouped-query attention with 1, 2 and all 4 key/value heads, tied and untied, an
  // explicit and the default MLP width.
  for (auto [kv, tied, ffn] : std::vector<std::tuple<int64_t, bool, int64_t>>{{1, false, 48}, {2, true, 0}, {4, false, 64}}) {
    ModelArgs l = g;
    l.arch = "llama";
    l.n_kv_heads = kv;
    l.tie_embeddings = tied;
    l.ffn_dim = ffn;
    out.push_back(l);
  }
  // Llama with mixture-of-experts MLPs: one dense layer first, shared experts, plain top-2; and
  // every layer MoE, group-limited top-1 without shared experts.
  ModelArgs m = g;
  m.arch = "llama";
  m.n_kv_heads = 2;
  m.ffn_dim = 48;
  m.moe.n_experts = 8;
  m.moe.top_k = 2;
  m.moe.n_shared = 1;
  m.moe.ffn_dim = 16;
  m.moe.first_k_dense = 1;
  out.push_back(m);
  m.moe.n_experts = 4;
  m.moe.top_k = 1;
  m.moe.n_shared = 0;
  m.moe.ffn_dim = 0;
  m.moe.first_k_dense = 0;
  m.moe.n_group = 2;
  m.moe.topk_group = 1;
  out.push_back(m);
  // The families built from Llama's blocks: qwen2 (q/k/v biases, split with their rows; kv 1 is
  // replicated over tp) and mistral with a window covering the context.
  // qwen3: per-head q/k norms (per-head gradients summed over tp), head_dim 12 with d_model 32.
  for (auto [arch, kv] :
       std::vector<std::pair<std::string, int64_t>>{{"qwen2", 2}, {"qwen2", 1}, {"qwen3", 2}, {"mistral", 2}}) {
    ModelArgs f = g;
    f.arch = arch;
    f.n_kv_heads = kv;
    f.ffn_dim = 48;
    if (arch == "mistral") f.sliding_window = 16;
    if (arch == "qwen3") f.head_dim = 12;
    out.push_back(f);
  }
  return out;
}

std::string label(const ModelArgs& a) {
  return a.arch + " L" + std::to_string(a.n_layers) + " kv" + std::to_string(a.n_kv_heads) +
         (a.tie_embeddings ? " tied" : "") + (a.moe.enabled() ? " moe" + std::to_string(a.moe.n_experts) : "");
}

}  // namespace

TEST(ModelFamily, RegistryKnowsEveryFamilyAndRejectsOthers) {
  const std::vector<std::string> names = model_family_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names, (std::vector<std::string>{"gpt2", "llama", "qwen2", "qwen3", "mistral"}));
  for (const std::string& n : names) EXPECT_EQ(model_family(n).arch(), n);
  try {
    model_family("mamba");
    FAIL() << "no error";
  } catch (const ModelArgsError& e) {
    ASSERT_EQ(e.keys().size(), 1u);
    EXPECT_EQ(e.keys()[0], "model.arch");
    EXPECT_NE(std::string(e.what()).find("'mamba' is not a model family (valid: gpt2, llama, qwen2, qwen3, mistral)"), std::string::npos) << e.what();
  }
}

TEST(ModelFamily, SpecAgreesWithTheModelItBuilds) {
  for (const ModelArgs& args : sample_args()) {
    SCOPED_TRACE(label(args));
    const ModelFamily& f = model_family(args.arch);
    std::unique_ptr<Model> model = f.build(args);
    EXPECT_EQ(model->arch(), args.arch);
    std::vector<Param*> params = model->params();
    std::set<std::string> names;
    int64_t numel = 0, active = 0, buffers = 0;
    std::map<int, int64_t> owned;  // layer index → elements of the params it owns
    for (Param* p : params) {
      EXPECT_TRUE(names.insert(p->name).second) << "two parameters named " << p->name;
      if (!p->trainable) {  // buffers (the MoE router's bias) are stored but not counted
        buffers += p->numel();
        continue;
      }
      numel += p->numel();
      // A routed expert's weights: top_k of the n_experts are active per token.
      active += p->placement.ep.kind == AxisPlacement::Kind::Expert ? p->numel() / args.moe.n_experts * args.moe.top_k : p->numel();
      owned[p->layer_index] += p->numel();
    }
    const ParamCount count = f.param_count(args);
    EXPECT_EQ(count.total, numel);
    EXPECT_EQ(count.active, active);
    if (args.moe.enabled()) {
      EXPECT_LT(count.active, numel);
    } else {
      EXPECT_EQ(count.active, numel);  // dense families
    }
    EXPECT_EQ(buffers, args.moe.enabled() ? (args.n_layers - args.moe.first_k_dense) * args.moe.n_experts : 0);
    EXPECT_EQ(model->num_params(), numel);
    for (int64_t T : {int64_t{8}, args.seq_len}) EXPECT_DOUBLE_EQ(f.flops_per_token(args, T), model->flops_per_token(T));

    ActivationShape shape;
    shape.micro_batch = 2;
    shape.seq_len = args.seq_len;
    const std::vector<LayerCost> costs = f.layer_costs(args, shape);
    std::vector<Layer*> layers = model->layers();
    ASSERT_EQ(costs.size(), layers.size());
    double act = f.backward_working_bytes(args, shape);
    for (size_t i = 0; i < layers.size(); ++i) {
      EXPECT_EQ(costs[i].name, layers[i]->name()) << "layer " << i;
      EXPECT_EQ(costs[i].params, owned[layers[i]->index()]) << costs[i].name;
      EXPECT_GE(costs[i].forward_flops, 0.0);
      EXPECT_GE(costs[i].activation_bytes, 0.0);
      act += costs[i].activation_bytes;
    }
    EXPECT_GT(costs[1].forward_flops, 0.0);
    EXPECT_GT(costs.back().forward_flops, 0.0) << "the output layer multiplies";
    EXPECT_DOUBLE_EQ(f.activation_bytes(args, shape), act);
    // Three times the forward FLOPs of the matrix products and attention is the model FLOPs up to
    // the parameters no product uses (norms, biases, positions, the embedding lookup).
    double fwd = 0;
    for (const LayerCost& c : costs) fwd += c.forward_flops;
    EXPECT_LE(3.0 * fwd, f.flops_per_token(args, args.seq_len) * 1.0000001);
    EXPECT_GE(3.0 * fwd, f.flops_per_token(args, args.seq_len) * 0.5);

    // Stored tensors: every name once; the whole model is stored.
    std::set<std::string> stored;
    int64_t stored_numel = 0;
    for (Param* p : params)
      for (const StoredTensor& t : stored_tensors(*p)) {
        EXPECT_TRUE(stored.insert(t.name).second) << "stored twice: " << t.name;
        stored_numel += shape_numel(t.shape);
      }
    EXPECT_EQ(stored_numel, numel + buffers);
  }
}

TEST(ModelFamily, TensorParallelPlanCoversEveryParameterOnce) {
  for (const ModelArgs& args : sample_args()) {
    SCOPED_TRACE(label(args));
    const ModelFamily& f = model_family(args.arch);
    std::unique_ptr<Model> model = f.build(args);
    const TensorParallelPlan plan = f.tensor_parallel_plan(args);
    // The plan splits exactly where the family's validate() says the shape splits.
    for (int tp : {1, 2, 3, 4}) {
      bool splits = true;
      try {
        f.validate(args, tp);
      } catch (const ModelArgsError&) {
        splits = false;
      }
      std::vector<std::string> problems = tensor_parallel_plan_problems(plan, *model, tp);
      std::string all;
      for (const std::string& p : problems) all += p + "\n";
      EXPECT_EQ(problems.empty(), splits) << "tp " << tp << ":\n" << all;
      if (tp <= 2 && args.n_kv_heads != 1) {
        EXPECT_TRUE(splits) << "tp " << tp;
      }
    }
    // The check can fail: a plan missing an entry, with one twice, or naming no parameter.
    TensorParallelPlan broken = plan;
    const std::string first = broken.params.front().param;
    broken.params.erase(broken.params.begin());
    broken.params.push_back(broken.params.back());
    broken.params.push_back({"no.such.weight", TpStyle::Replicated});
    const std::vector<std::string> problems = tensor_parallel_plan_problems(broken, *model, 1);
    ASSERT_EQ(problems.size(), 3u);
    EXPECT_EQ(problems[0], first + ": no entry in the plan");
  }
}

TEST(ModelFamily, ShapeErrorsNameTheKey) {
  ModelArgs a = sample_args().front();
  auto keys_of = [](const ModelArgs& args, int tp) {
    try {
      model_family(args.arch).validate(args, tp);
    } catch (const ModelArgsError& e) {
      return e.keys();
    }
    return std::vector<std::string>{};
  };
  EXPECT_TRUE(keys_of(a, 1).empty());
  ModelArgs b = a;
  b.d_model = 30;
  EXPECT_EQ(keys_of(b, 1), (std::vector<std::string>{"model.d_model", "model.n_heads"}));
  EXPECT_EQ(keys_of(a, 3), (std::vector<std::string>{"model.n_heads", "parallel.tp"}));
  b = a;
  b.vocab_size = 97;
  EXPECT_EQ(keys_of(b, 2), (std::vector<std::string>{"model.vocab_size", "parallel.tp"}));
  // Mistral: a window shorter than the context would need band attention, refused by name; one
  // that covers it (or none) is full attention.
  ModelArgs m = a;
  m.arch = "mistral";
  for (int64_t w : {0, 16, 4096}) {
    m.sliding_window = w;
    EXPECT_TRUE(keys_of(m, 1).empty()) << w;
  }
  m.sliding_window = 8;
  EXPECT_EQ(keys_of(m, 1), (std::vector<std::string>{"model.sliding_window", "model.seq_len"}));
  try {
    model_family("mistral").build(m);
    FAIL() << "no error";
  } catch (const ModelArgsError& e) {
    EXPECT_NE(std::string(e.what()).find("model.sliding_window: 8 positions is shorter than the context model.seq_len = "
                                         "16: sliding-window (band) attention does not run"),
              std::string::npos)
        << e.what();
  }
}

// GPT-2's numbers as launch/ computed them before the registry: 6·N + 12·L·d·T, and the activation
// estimate of each block, the head and one block's backward.
TEST(GptFamily, NumbersAsBefore) {
  ModelArgs a{.arch = "gpt2", .vocab_size = 50304, .seq_len = 1024, .d_model = 768, .n_layers = 12,
              .n_heads = 12};
  const ModelFamily& f = model_family("gpt2");
  EXPECT_EQ(f.param_count(a).total, 124475904);
  EXPECT_DOUBLE_EQ(f.flops_per_token(a, 1024), 6.0 * 124475904 + 12.0 * 12 * 768 * 1024);
  for (Recompute r : {Recompute::None, Recompute::Mlp, Recompute::Full})
    for (int64_t bytes : {int64_t{2}, int64_t{4}}) {
      a.recompute = r;
      ActivationShape s{16, 1024, bytes, bytes};  // the residual stream at the working width, as before
      const double C = 768, H = 12, V = 50304, L = 12, tokens = 16 * 1024, ab = static_cast<double>(bytes);
      double block = 16.0 * C * ab + 16.0 + 4.0 * H;
      if (r == Recompute::Mlp) block -= 8.0 * C * ab;
      if (r == Recompute::Full) block = C * ab;
      const double want = tokens * (L * block + (2.0 * C * ab + 12.0 + V * ab) + 10.0 * C * ab);
      EXPECT_DOUBLE_EQ(f.activation_bytes(a, s), want);
    }
}

// An fp32 residual stream beside bf16 activations (train.residual_dtype: fp32) costs, per token,
// 2 more bytes for each of a block's two stream tensors (x, x2; only x under full recompute) and the
// head's input, and in one block's backward 2 more for each of the two stream gradients plus their
// 2-byte bf16 copies: C·(4·L + 2 + 8) bytes per token, C·(2·L + 2 + 8) under full recompute.
TEST(ModelFamily, ActivationsCountAnFp32ResidualStream) {
  for (const std::string& arch : model_family_names()) {
    ModelArgs a{.arch = arch, .vocab_size = 50304, .seq_len = 1024, .d_model = 768, .n_layers = 12,
                .n_heads = 12};
    const ModelFamily& f = model_family(arch);
    for (Recompute r : {Recompute::None, Recompute::Mlp, Recompute::Full}) {
      a.recompute = r;
      const ActivationShape bf16{16, 1024, 2, 2}, fp32_stream{16, 1024, 2, 4}, fp32{16, 1024, 4, 4};
      EXPECT_FALSE(bf16.rounded_stream_gradient());
      EXPECT_TRUE(fp32_stream.rounded_stream_gradient());
      const double per_layer = r == Recompute::Full ? 2.0 : 4.0;
      const double want = 16.0 * 1024.0 * 768.0 * (per_layer * 12.0 + 2.0 + 8.0);
      EXPECT_DOUBLE_EQ(f.activation_bytes(a, fp32_stream) - f.activation_bytes(a, bf16), want) << arch;
      EXPECT_LT(f.activation_bytes(a, fp32_stream), f.activation_bytes(a, fp32)) << arch;
    }
  }
}

// Under train.fp8 the plan counts what the projections keep for W (models/fp8_linear.h Fp8Saved): per
// token and block 1 byte per element of their inputs (blockwise: + a float per 128), the MLP's only
// where it keeps its activations. GPT-2: ln_1, att, ln_2 [C] and fc_act [4C]; Llama (ffn = 2048 here):
// h1, att, h2 [C] and act [F]; none under full recompute.
TEST(ModelFamily, ActivationsCountTheFp8KeptTransposes) {
  for (const std::string& arch : {std::string("gpt2"), std::string("llama")}) {
    ModelArgs a{.arch = arch, .vocab_size = 50304, .seq_len = 1024, .d_model = 768, .n_layers = 12,
                .n_heads = 12, .ffn_dim = 2048};
    const ModelFamily& f = model_family(arch);
    const ActivationShape bf16{16, 1024, 2, 2};
    const double mlp = arch == "gpt2" ? 4.0 * 768 : 2048.0, tokens_layers = 16.0 * 1024.0 * 12.0;
    for (Recompute r : {Recompute::None, Recompute::Mlp, Recompute::Full}) {
      a.recompute = r;
      a.fp8 = Fp8Recipe::None;
      const double plain = f.activation_bytes(a, bf16);
      const double per_token = r == Recompute::Full ? 0.0 : r == Recompute::Mlp ? 2.0 * 768 : 3.0 * 768 + mlp;
      a.fp8 = Fp8Recipe::Tensorwise;
      EXPECT_DOUBLE_EQ(f.activation_bytes(a, bf16) - plain, tokens_layers * per_token) << arch;
      a.fp8 = Fp8Recipe::Blockwise;
      EXPECT_DOUBLE_EQ(f.activation_bytes(a, bf16) - plain, tokens_layers * per_token * (1.0 + 4.0 / 128)) << arch;
    }
  }
}

// The 2B MoE's shape (configs/moe-2b.yaml): 12 layers of d 1536, 64 experts of 512, top 6, 2 shared,
// 1 dense layer.
ModelArgs moe_2b_args() {
  ModelArgs a{.arch = "llama", .vocab_size = 32000, .seq_len = 2048, .d_model = 1536, .n_layers = 12,
              .n_heads = 12, .ffn_dim = 4096};
  a.moe.n_experts = 64;
  a.moe.top_k = 6;
  a.moe.n_shared = 2;
  a.moe.ffn_dim = 512;
  a.moe.first_k_dense = 1;
  return a;
}

// A MoE block under tensorwise without expert parallelism keeps its routed experts' input x_e only as
// codes gathered from h (MoeMlp::permutes_with_cast): per slot 2·C bytes of bf16 fewer than under
// expert parallelism, where the rows arrive and are kept, and the slots' int32 index into h (4 B) more.
// Both keep x_e's transposed codes. Its backward gathers d_out_e's codes from dy likewise: one layer's
// slots hold one row gradient of 2·C bytes fewer at the backward's peak. Blockwise keeps x_e (and its
// runs, where whole 1×128 groups wide) either way.
TEST(ModelFamily, TensorwiseMoeKeepsCodesOfTheGatheredRows) {
  ModelArgs a = moe_2b_args();
  const ModelFamily& f = model_family("llama");
  ActivationShape one{8, 2048, 2, 2}, exchanged = one;
  exchanged.ep = 8;
  const double layer_slots = 8.0 * 2048.0 * 6.0, slots = layer_slots * 11.0;  // tokens × top-k (× MoE layers)
  for (Recompute r : {Recompute::None, Recompute::Mlp}) {
    a.recompute = r;
    a.fp8 = Fp8Recipe::Tensorwise;
    EXPECT_DOUBLE_EQ(f.activation_bytes(a, exchanged) - f.activation_bytes(a, one),
                     slots * (2.0 * 1536 - 4.0) + layer_slots * 2.0 * 1536);
    a.fp8 = Fp8Recipe::Blockwise;
    EXPECT_DOUBLE_EQ(f.activation_bytes(a, exchanged), f.activation_bytes(a, one));
  }
}

// The routed experts' kept codes in the plan (MoeMlp::State): under expert parallelism both recipes keep
// x_e itself and the transposed codes of x_e [C] and act_e [F] per slot, a byte an element — blockwise
// only where the row is whole 1×128 groups wide. Without shared experts (whose width follows F) the
// recipes' difference is then the dense projections' blockwise scales, the same at any expert width,
// plus act_e's codes at an expert width off whole groups (320), which blockwise casts in its GEMMs.
TEST(ModelFamily, BlockwiseMoeKeepsTheRunsOfWholeGroupRows) {
  ModelArgs a = moe_2b_args();
  a.moe.n_shared = 0;
  const ModelFamily& f = model_family("llama");
  ActivationShape exchanged{8, 2048, 2, 2};
  exchanged.ep = 8;
  const double slots = 8.0 * 2048.0 * 6.0 * 11.0;  // tokens × top-k × MoE layers
  auto recipes_apart = [&](int64_t F) {
    a.moe.ffn_dim = F;
    a.fp8 = Fp8Recipe::Blockwise;
    const double bw = f.activation_bytes(a, exchanged);
    a.fp8 = Fp8Recipe::Tensorwise;
    return bw - f.activation_bytes(a, exchanged);
  };
  EXPECT_DOUBLE_EQ(recipes_apart(512) - recipes_apart(320), slots * 320.0);
}

// Under sequence parallelism a column-parallel layer keeps its gathered input for W: under tensorwise
// the codes of its transpose (a byte an element) in place of the gathered bf16 input, where the
// forward keeps (ln_1 / h1 always, ln_2 / h2 without recompute mlp); blockwise keeps the bf16 input.
TEST(ModelFamily, SequenceParallelFp8KeepsCodesOfTheGatheredInput) {
  for (const std::string& arch : {std::string("gpt2"), std::string("llama")}) {
    ModelArgs a{.arch = arch, .vocab_size = 50304, .seq_len = 1024, .d_model = 768, .n_layers = 12,
                .n_heads = 12, .ffn_dim = 2048};
    const ModelFamily& f = model_family(arch);
    ActivationShape sp{16, 1024, 2, 2};
    sp.tp = 2;
    sp.sequence_parallel = true;
    const double tokens_layers = 16.0 * 1024.0 * 12.0;
    for (Recompute r : {Recompute::None, Recompute::Mlp}) {
      a.recompute = r;
      a.fp8 = Fp8Recipe::None;
      const double plain = f.activation_bytes(a, sp);
      a.fp8 = Fp8Recipe::Tensorwise;
      const double inputs = r == Recompute::None ? 2.0 : 1.0;  // gathered inputs kept as codes
      EXPECT_DOUBLE_EQ(f.activation_bytes(a, sp) - plain, -tokens_layers * inputs * 768 * (2.0 - 1.0)) << arch;
      a.fp8 = Fp8Recipe::Blockwise;
      EXPECT_DOUBLE_EQ(f.activation_bytes(a, sp), plain) << arch;
    }
  }
}

// Llama's numbers: the parameters of Llama 3.2 1B with an untied output layer, torchtitan's FLOPs,
// Meta's default MLP width, and the errors of impossible grouped-query shapes.
TEST(LlamaFamily, NumbersAndShapeErrors) {
  ModelArgs a{.arch = "llama", .vocab_size = 128256, .seq_len = 4096, .d_model = 2048, .n_layers = 16,
              .n_heads = 32, .n_kv_heads = 8, .ffn_dim = 8192, .rope_theta = 500000};
  const ModelFamily& f = model_family("llama");
  // Llama 3.2 1B has 1,235,814,400 parameters with its tied embedding; untied adds V·d.
  const int64_t untied = 1235814400 + 128256 * 2048;
  EXPECT_EQ(f.param_count(a).total, untied);
  EXPECT_DOUBLE_EQ(f.flops_per_token(a, 4096), 6.0 * (untied - 128256.0 * 2048) + 12.0 * 16 * 2048 * 4096);
  a.tie_embeddings = true;
  EXPECT_EQ(f.param_count(a).total, 1235814400);
  // A tied output layer still multiplies: the same model FLOPs.
  EXPECT_DOUBLE_EQ(f.flops_per_token(a, 4096), 6.0 * (untied - 128256.0 * 2048) + 12.0 * 16 * 2048 * 4096);
  a.ffn_dim = 0;
  EXPECT_EQ(f.build(a)->params()[5]->full_shape[0], 2 * 5632) << "2/3 of 4·2048 up to a multiple of 256";

  auto keys_of = [&](ModelArgs b, int tp) {
    try {
      f.validate(b, tp);
    } catch (const ModelArgsError& e) {
      return e.keys();
    }
    return std::vector<std::string>{};
  };
  ModelArgs b = a;
  b.n_kv_heads = 5;
  EXPECT_EQ(keys_of(b, 1), (std::vector<std::string>{"model.n_kv_heads", "model.n_heads"}));
  b.n_kv_heads = 2;
  EXPECT_TRUE(keys_of(b, 2).empty());
  EXPECT_TRUE(keys_of(b, 4).empty()) << "tp a multiple of the key/value heads replicates each over tp / 2 ranks";
  EXPECT_TRUE(keys_of(b, 32).empty());
  // tp neither dividing nor a multiple of the key/value heads: 4 heads at tp 6 (12 query heads).
  b.n_heads = 12;
  b.d_model = 12 * 128;
  b.n_kv_heads = 4;
  EXPECT_EQ(keys_of(b, 6), (std::vector<std::string>{"model.n_kv_heads", "parallel.tp"}));
  b = a;
  b.n_heads = 16;
  b.d_model = 16 * 33;
  b.n_kv_heads = 4;
  EXPECT_EQ(keys_of(b, 1), (std::vector<std::string>{"model.d_model", "model.n_heads"})) << "odd head dim";
  b = a;
  b.ffn_dim = 8190;
  EXPECT_EQ(keys_of(b, 4), (std::vector<std::string>{"model.ffn_dim", "parallel.tp"}));
}

// The MoE shape of the benchmark beside torch_llama.py (the MoE peer's shape: 12 layers of d 1536, 64
// experts of 512, top 6, 2 shared, 1 dense layer): 1.94B parameters, 0.44B active; model FLOPs from
// the active ones; names as Hugging Face's DeepseekV3; the MoE keys' errors.
TEST(LlamaFamily, MoeNumbersNamesAndErrors) {
  ModelArgs a = moe_2b_args();
  const ModelFamily& f = model_family("llama");
  const int64_t attention = 1536 + 3 * 1536 * 1536 + 1536 * 1536;
  const int64_t dense = attention + 1536 + 3 * 1536 * 4096;
  const int64_t moe_total = attention + 1536 + 64 * 1536 + 64 * 3 * 1536 * 512 + 3 * 1536 * 1024;
  const int64_t moe_active = attention + 1536 + 64 * 1536 + 6 * 3 * 1536 * 512 + 3 * 1536 * 1024;
  const int64_t embeddings = 2 * 32000 * 1536;
  const ParamCount n = f.param_count(a);
  EXPECT_EQ(n.total, embeddings + dense + 11 * moe_total + 1536);
  EXPECT_EQ(n.active, embeddings + dense + 11 * moe_active + 1536);
  EXPECT_EQ(n.total, 1944393216);  // 1.94B
  EXPECT_EQ(n.active, 439162368);  // 0.44B
  EXPECT_DOUBLE_EQ(f.flops_per_token(a, 2048),
                   6.0 * static_cast<double>(n.active - 32000 * 1536) + 12.0 * 12 * 1536 * 2048);
  EXPECT_NE(f.describe(a).find("64 routed experts of ffn 512, top 6, 2 shared"), std::string::npos) << f.describe(a);

  a.n_layers = 2;
  a.d_model = 32;
  a.n_heads = 4;
  a.ffn_dim = 48;
  a.vocab_size = 96;
  a.moe.n_experts = 4;
  a.moe.ffn_dim = 16;
  a.moe.top_k = 2;
  a.moe.n_shared = 1;
  std::unique_ptr<Model> model = f.build(a);
  std::set<std::string> stored;
  for (Param* p : model->params())
    for (const StoredTensor& t : stored_tensors(*p)) stored.insert(t.name);
  for (const char* name : {"model.layers.1.mlp.gate.weight", "model.layers.1.mlp.gate.e_score_correction_bias",
                           "model.layers.1.mlp.experts.0.gate_proj.weight", "model.layers.1.mlp.experts.3.up_proj.weight",
                           "model.layers.1.mlp.experts.2.down_proj.weight",
                           "model.layers.1.mlp.shared_experts.gate_proj.weight",
                           "model.layers.1.mlp.shared_experts.down_proj.weight", "model.layers.0.mlp.gate_proj.weight"})
    EXPECT_TRUE(stored.count(name)) << name;
  EXPECT_FALSE(stored.count("model.layers.0.mlp.gate.weight")) << "the first layer stays dense";
  EXPECT_EQ(model->moe_layers().size(), 1u);

  auto keys_of = [&](ModelArgs b) {
    try {
      f.validate(b, 1);
    } catch (const ModelArgsError& e) {
      return e.keys();
    }
    return std::vector<std::string>{};
  };
  EXPECT_TRUE(keys_of(a).empty());
  ModelArgs b = a;
  b.moe.top_k = 5;
  EXPECT_EQ(keys_of(b), (std::vector<std::string>{"model.moe.top_k", "model.moe.n_experts"}));
  b = a;
  b.moe.n_group = 3;
  EXPECT_EQ(keys_of(b), (std::vector<std::string>{"model.moe.n_group", "model.moe.n_experts"}));
  b.moe.n_group = 2;
  b.moe.topk_group = 3;
  EXPECT_EQ(keys_of(b), (std::vector<std::string>{"model.moe.topk_group", "model.moe.n_group"}));
  b.moe.topk_group = 1;
  b.moe.top_k = 3;
  EXPECT_EQ(keys_of(b), (std::vector<std::string>{"model.moe.top_k", "model.moe.topk_group", "model.moe.n_group"}));
  b = a;
  b.moe.first_k_dense = 2;
  EXPECT_EQ(keys_of(b), (std::vector<std::string>{"model.moe.first_k_dense", "model.n_layers"}));
}
