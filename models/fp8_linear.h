// FP8 training of the block projections (train.fp8.recipe; docs/kernels.md "FP8 training"): the
// three GEMMs of y = x·Wᵀ — forward, input gradient, weight gradient — with both operands cast to
// FP8 (current scaling: each cast's scales come from the amax of the tensor it casts, no history),
// fp32 accumulation (tensorwise's forward: Hopper's fast accumulation, as torchao runs it), the
// output in the usual dtype. Each tensor is cast once: x in the forward and dy in the input
// gradient, with the transposed copies the weight gradient reads kept until then (Fp8Saved).
// Master weights, optimizer state, the embedding, the output layer, norms and attention are
// untouched.
//
//   recipe      activations x        weights W            gradients dy          (as their authors)
//   tensorwise  E4M3, one scale      E4M3, one scale      E5M2, one scale       torchao Float8Linear
//   blockwise   E4M3, 1×128 tiles    E4M3, 128×128 blocks E4M3, 1×128 tiles     DeepSeek-V3
//
// Every GEMM reads both operands K-major (Hopper's FP8 tensor cores take no other layout):
//   forward          y[N, O]  = x[N, I]     · W[O, I]ᵀ     K = I
//   input gradient   dx[N, I] = dy[N, O]    · (Wᵀ)[I, O]ᵀ  K = O   (Wᵀ cast from W)
//   weight gradient  dW[O, I] = (dyᵀ)[O, N] · (xᵀ)[I, N]ᵀ  K = N   (dyᵀ and xᵀ cast from dy and x)
// so the transposed copies of W, dy and x are cast too; under blockwise the transposed activation
// and gradient take 128×1 tiles (runs of 128 tokens), DeepSeek-V3's backward layout. The CPU runs
// the same casts and multiplies the dequantised values in fp32 (ops::fp8_gemm), so a CPU run
// emulates the recipe.
#pragma once
#include <array>
#include <string>

#include "parallel/param.h"
#include "runtime/ops.h"

namespace tetra {

enum class Fp8Recipe { None, Tensorwise, Blockwise };
// Each recipe's text, in enum order: the config's choices (launch/config) and fp8_recipe_name.
inline constexpr std::array<const char*, 3> kFp8RecipeNames = {"none", "tensorwise", "blockwise"};

const char* fp8_recipe_name(Fp8Recipe recipe);

// How a recipe casts one kind of operand.
using Fp8Cast = ops::Fp8Cast;
struct Fp8RecipeCasts {
  Fp8Cast activation, weight, gradient;
  // The forward GEMM with Hopper's fast accumulation (ops::fp8_gemm): tensorwise, as torchao's
  // Float8Linear runs its forward; the gradients' GEMMs always promote their partial sums to fp32.
  bool forward_fast_accum = false;
};
Fp8RecipeCasts fp8_recipe_casts(Fp8Recipe recipe);

// FP8's GEMMs need every dimension a multiple of 16 (cuBLASLt on Hopper); the CPU emulation keeps
// the same rule so that a config that trains on the CPU trains on a GPU.
constexpr int64_t kFp8Multiple = 16;

// One tensor in FP8: codes [rows, cols] (the recipe's format) and scales (fp8_scale_shape).
struct Fp8Operand {
  Tensor q, scale;
  ops::Fp8Scaling scaling = ops::Fp8Scaling::Tensorwise;
  bool defined() const { return q.defined(); }
};

// What one projection keeps of one micro-batch for its weight gradient, so that x and dy are each
// read and cast once: xᵀ [I, N], cast in the same pass as x in the forward, and dyᵀ [O, N], cast
// with dy in the input gradient. N·(I + O) bytes of codes while kept (the bf16 x and dy it stands
// for take twice that); released by the weight gradient. A part left undefined (a forward that did
// not keep it: evaluation, a recomputed layer's first pass) is cast from x or dy there instead.
// x_amax, dy_amax: the amax of x or dy (U32 [1]) as the op that wrote it measured (ops.h's amax
// outputs), which a tensorwise cast then takes instead of a pass over the tensor of its own; set by
// the layer through fp8_amax_slot just before the op, consumed by the cast.
struct Fp8Saved {
  Fp8Operand x_t, dy_t;
  Tensor x_amax, dy_amax;
};

// Bytes per element of what Fp8Saved keeps of a projection's input xᵀ from forward to backward under
// `recipe` (the memory plans): its codes, and blockwise's 128×1 scales (a float per 128); 0 for none.
double fp8_kept_bytes_per_element(Fp8Recipe recipe);

// Whether `recipe`'s cast of x (gradient false) or dy takes an amax its producer measured: a
// tensorwise cast (a group-scaled one measures its groups itself); false under None.
bool fp8_takes_measured_amax(Fp8Recipe recipe, bool gradient);

// The slot of `fp8` for the amax of x (gradient false) or dy that `recipe`'s cast takes, made
// U32 [1] on `device`; null where there is none to fill (no Fp8Saved, or the recipe scales that
// operand by groups, which the cast measures itself).
Tensor* fp8_amax_slot(Fp8Recipe recipe, Fp8Saved* fp8, bool gradient, Device device);

namespace fp8_linear {
// x [M, K] cast as `cast` says; with `transposed`, xᵀ [K, M] too (in the same pass over x). amax
// (Tensorwise only, may be null): ops::fp8_quantize's — what x's producer measured, or for x one part
// of a larger tensor (a tensor-parallel slice: models/fp8_tensor_parallel.h) the whole's. Without
// it a tensorwise cast measures x first with ops::fp8_amax (the pass the op profile counts as
// fp8_amax calls: what the producers' amax outputs spare).
Fp8Operand cast(const Tensor& x, const Fp8Cast& cast, Fp8Operand* transposed = nullptr, const Tensor* amax = nullptr);
// y[M, N] (+)= a[M, K] · b[N, K]ᵀ on the operands' dequantised values (ops::fp8_gemm; fast_accum:
// tensorwise operands only), finished by `epilogue` (ops::Fp8Epilogue: bias, residual, GELU, amax).
void gemm(Tensor& y, const Fp8Operand& a, const Fp8Operand& b, bool accumulate, bool fast_accum = false,
          const ops::Fp8Epilogue& epilogue = {});

// y[N, O] (+)= x[N, I] · w[O, I]ᵀ; y fp32 or bf16. keep (may be null): receives xᵀ for the weight
// gradient. epilogue: the forward GEMM's (ops::Fp8Epilogue; its bias [O], residual [N, O], GELU).
void forward(Fp8Recipe recipe, Tensor& y, const Tensor& x, const Tensor& w, bool accumulate,
             Fp8Saved* keep = nullptr, const ops::Fp8Epilogue& epilogue = {});
// dx[N, I] (+)= dy[N, O] · w[O, I]. keep (may be null): receives dyᵀ for the weight gradient.
// epilogue: the input gradient GEMM's (its GELU backward, amax).
void backward_input(Fp8Recipe recipe, Tensor& dx, const Tensor& dy, const Tensor& w, bool accumulate,
                    Fp8Saved* keep = nullptr, const ops::Fp8Epilogue& epilogue = {});
// dw[O, I] += dy[N, O]ᵀ · x[N, I], reading kept's xᵀ and dyᵀ where defined (and releasing them),
// else casting x and dy now.
void backward_weight(Fp8Recipe recipe, Tensor& dw, const Tensor& dy, const Tensor& x, Fp8Saved* kept = nullptr);

// The Linear's FP8 path with its weight Param: w's FP8 copy (fp8_q, fp8_scale: ZeRO-3 gathered it
// already cast, parallel/zero/fp8_gather.h — the codes and scales the cast of the whole weight
// gives; the input gradient transposes them, ops::fp8_transpose) when defined; else,
// within a training step, the step's cast of w.value (Param::fp8_step: made at the first GEMM,
// read by the later ones), else the functions above on w.value.
void forward(Fp8Recipe recipe, Tensor& y, const Tensor& x, const Param& w, bool accumulate, Fp8Saved* keep = nullptr,
             const ops::Fp8Epilogue& epilogue = {});
void backward_input(Fp8Recipe recipe, Tensor& dx, const Tensor& dy, const Param& w, bool accumulate,
                    Fp8Saved* keep = nullptr, const ops::Fp8Epilogue& epilogue = {});
}  // namespace fp8_linear

}  // namespace tetra
