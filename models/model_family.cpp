#include "models/model_family.h"

#include "models/gpt_family.h"
#include "models/llama_family.h"

namespace tetra {

namespace {

// The registry: one line per family, in the order `model.arch` lists them.
const std::vector<const ModelFamily*>& families() {
  static const std::vector<const ModelFamily*> all = {&gpt_family(), &llama_family(), &qwen2_family(),
                                                           &qwen3_family(), &mistral_family()};
  return all;
}

std::string str(int64_t v) { return std::to_string(v); }

std::string divisors(int64_t n) {
  std::string out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out += (out.empty() ? "" : ", ") + str(d);
  return out;
}

}  // namespace

double ModelFamily::activation_bytes(const ModelArgs& args, const ActivationShape& shape) const {
  double total = backward_working_bytes(args, shape);
  for (const LayerCost& c : layer_costs(args, shape)) total += c.activation_bytes;
  return total;
}

const ModelFamily& model_family(const std::string& arch) {
  for (const ModelFamily* f : families())
    if (f->arch() == arch) return *f;
  std::string names;
  for (const std::string& n : model_family_names()) names += (names.empty() ? "" : ", ") + n;
  throw ModelArgsError({"model.arch"}, "'" + arch + "' is not a model family (valid: " + names + ")");
}

std::vector<std::string> model_family_names() {
  std::vector<std::string> out;
  for (const ModelFamily* f : families()) out.push_back(f->arch());
  return out;
}

const std::vector<std::string>& common_model_keys() {
  static const std::vector<std::string> keys = {"arch", "vocab_size", "seq_len", "d_model", "n_layers", "n_heads",
                                                "init_from"};
  return keys;
}

void validate_fp8_widths(const ModelArgs& a, const std::vector<std::pair<std::string, int64_t>>& widths) {
  if (a.fp8 == Fp8Recipe::None) return;
  for (const auto& [key, width] : widths)
    if (width % kFp8Multiple != 0)
      throw ModelArgsError({"train.fp8.recipe", key},
                           std::string("FP8 GEMMs need every projection width a multiple of ") + str(kFp8Multiple) +
                               "; " + key + " gives " + str(width) + " (set train.fp8.recipe: none, or change the width)");
}

void validate_common_shape(const ModelArgs& a, int tp) {
  if (a.vocab_size < 2) throw ModelArgsError({"model.vocab_size"}, str(a.vocab_size) + " is too small (at least 2)");
  if (a.seq_len < 1 || a.d_model < 1 || a.n_layers < 1 || a.n_heads < 1)
    throw ModelArgsError({a.seq_len < 1 ? "model.seq_len" : a.d_model < 1 ? "model.d_model"
                          : a.n_layers < 1 ? "model.n_layers" : "model.n_heads"},
                         "must be positive (seq_len, d_model, n_layers and n_heads are ≥ 1)");
  if (tp < 1) tp = 1;
  if (a.n_heads % tp != 0)
    throw ModelArgsError({"model.n_heads", "parallel.tp"},
                         str(a.n_heads) + " heads do not split over parallel.tp = " + str(tp) + " ranks; use tp among " +
                             divisors(a.n_heads) + ", or a multiple of " + str(tp) + " heads");
  if (a.head_dim == 0 && a.d_model % a.n_heads != 0) {  // an explicit head_dim (qwen3) has no such rule
    const int64_t lo = a.d_model / a.n_heads * a.n_heads, hi = lo + a.n_heads;
    throw ModelArgsError({"model.d_model", "model.n_heads"},
                         str(a.d_model) + " is not divisible by model.n_heads = " + str(a.n_heads) +
                             " (every head has d_model/n_heads channels); use a multiple of " + str(a.n_heads) +
                             (lo > 0 ? ", e.g. " + str(lo) + " or " + str(hi) : ", e.g. " + str(hi)));
  }
  if (a.vocab_size % tp != 0) {
    const int64_t padded = (a.vocab_size + tp - 1) / tp * tp;
    throw ModelArgsError({"model.vocab_size", "parallel.tp"},
                         str(a.vocab_size) + " does not split over parallel.tp = " + str(tp) +
                             " ranks (the embedding and output layer are split by vocabulary); pad it to a multiple "
                             "of " + str(tp) + ", e.g. " + str(padded));
  }
}

}  // namespace tetra
