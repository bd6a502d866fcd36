// FP8 training of the block projections (train.fp8.recipe; docs/kernels.md "FP8 training"): the
// three GEMMs of y = x·Wᵀ — forward, input gradient, weight gradient — with both operands cast to
// FP8 just before the GEMM (current scaling: each cast's scales come from the amax of the tensor it
// casts, no history), fp32 accumulation, the output in the usual dtype. Master weights, optimizer
// state, the embedding, the output layer, norms and attention are untouched.
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
struct Fp8Cast {
  ops::Fp8Scaling scaling = ops::Fp8Scaling::Tensorwise;
  DType format = DType::F8E4M3;
};
struct Fp8RecipeCasts {
  Fp8Cast activation, weight, gradient;
};
Fp8RecipeCasts fp8_recipe_casts(Fp8Recipe recipe);

// FP8's GEMMs need every dimension a multiple of 16 (cuBLASLt on Hopper); the CPU emulation keeps
// the same rule so that a config that trains on the CPU trains on a GPU.
constexpr int64_t kFp8Multiple = 16;

namespace fp8_linear {
// y[N, O] (+)= x[N, I] · w[O, I]ᵀ; y fp32 or bf16.
void forward(Fp8Recipe recipe, Tensor& y, const Tensor& x, const Tensor& w, bool accumulate);
// dx[N, I] (+)= dy[N, O] · w[O, I].
void backward_input(Fp8Recipe recipe, Tensor& dx, const Tensor& dy, const Tensor& w, bool accumulate);
// dw[O, I] += dy[N, O]ᵀ · x[N, I].
void backward_weight(Fp8Recipe recipe, Tensor& dw, const Tensor& dy, const Tensor& x);

// The Linear's FP8 path with its weight Param: w's FP8 copy (fp8_q, fp8_scale: ZeRO-3 gathered it
// already cast, parallel/zero/fp8_gather.h — the codes and scales the cast of the whole weight
// gives) when defined, else the functions above on w.value (models/fp8_weight_operand.cpp).
void forward(Fp8Recipe recipe, Tensor& y, const Tensor& x, const Param& w, bool accumulate);
void backward_input(Fp8Recipe recipe, Tensor& dx, const Tensor& dy, const Param& w, bool accumulate);
}  // namespace fp8_linear

}  // namespace tetra
