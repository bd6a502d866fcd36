# A float8 linear layer for the PyTorch peers (torch_gpt.py, torch_llama.py --fp8 tensorwise), on
# torch._scaled_mm with tensorwise dynamic scaling, the recipe of torchao's Float8Linear (its default,
# torchtitan's "tensorwise"), written here because torchao is not installed where the peers run.
#
# Per call, for y = x·wᵀ with x [M, K] (bf16 under autocast), w [N, K] (the fp32 master weight):
#   forward  x and w each scaled by 448/amax to E4M3;  y = scaled_mm(x8, w8ᵀ) in bf16
#   backward g = dL/dy scaled by 57344/amax to E5M2;   dx = scaled_mm(g8, w8)    [M, K]
#                                                      dw = scaled_mm(g8ᵀ, x8)   [N, K]
# E4M3 (max 448) for the forward operands, E5M2 (max 57344) for gradients, as torchao. The amax is
# the whole tensor's, recomputed every call (dynamic, no history). scaled_mm takes the inverse scales
# and wants its first operand row-major and its second column-major: x8 [M, K] and g8 [M, N] are
# row-major as made; w8ᵀ is w8's transpose view (column-major [K, N]); w8 for dx, x8 for dw and g8ᵀ
# get the copies `.t().contiguous().t()` / `.t().contiguous()` that torchao makes. Forward GEMM with
# fast accumulation, the two gradient GEMMs without (torchao's defaults). Bias, where a layer has
# one (GPT-2), is added in bf16 after the GEMM, as torchao does.
#
# emulate=True runs the same code without a Hopper GPU: each scaled_mm becomes a matmul of the
# dequantised operands in fp32 (with the same layout checks), and where this PyTorch has no float8
# dtypes the cast rounds to E4M3 / E5M2 in software (round to nearest even, subnormals, saturated
# at the format's max). scripts/bench/fp8_peer_check.py checks the gradients on the CPU.
import torch
import torch.nn as nn


class Float8Format:
    def __init__(self, name, max_value, mantissa_bits, min_exponent):
        self.name, self.max, self.mbits, self.emin = name, max_value, mantissa_bits, min_exponent
        self.dtype = getattr(torch, name, None)  # None before PyTorch 2.1

    def round_in_fp32(self, x):
        """Values of x (fp32, already within ±max) rounded to this format, kept in fp32."""
        mag = x.abs()
        exp = torch.floor(torch.log2(mag.clamp(min=2.0 ** self.emin))).clamp(min=self.emin)
        step = torch.pow(2.0, exp - self.mbits)  # spacing of the format's values in [2^e, 2^(e+1))
        return torch.round(x / step) * step      # torch.round: half to even


E4M3 = Float8Format("float8_e4m3fn", 448.0, 3, -6)
E5M2 = Float8Format("float8_e5m2", 57344.0, 2, -14)
AMAX_EPS = 1e-12  # torchao's floor on amax: an all-zero tensor gets a finite scale


def quantize(x, fmt, emulate=False):
    """(x8, inverse scale): x scaled by fmt.max/amax(x), cast to fmt; x8 * inverse ≈ x."""
    amax = x.detach().abs().max().float()
    scale = fmt.max / amax.clamp(min=AMAX_EPS)
    scaled = (x.float() * scale).clamp(-fmt.max, fmt.max)
    if fmt.dtype is not None:
        x8 = scaled.to(fmt.dtype)
    elif emulate:
        x8 = fmt.round_in_fp32(scaled)
    else:
        raise RuntimeError(f"this PyTorch ({torch.__version__}) has no {fmt.name}; run with --emulate")
    return x8, scale.reciprocal()


def emulated_scaled_mm(a, b, scale_a, scale_b, out_dtype, use_fast_accum=False):
    """torch._scaled_mm's arithmetic in fp32 on any device, with its layout rules enforced."""
    if a.stride(-1) != 1 or b.stride(0) != 1:
        raise RuntimeError(f"scaled_mm layouts: first operand must be row-major (strides {a.stride()}), "
                           f"second column-major (strides {b.stride()})")
    return ((a.float() * scale_a) @ (b.float() * scale_b)).to(out_dtype)


def scaled_mm(a, b, scale_a, scale_b, out_dtype, use_fast_accum, emulate):
    if emulate:
        return emulated_scaled_mm(a, b, scale_a, scale_b, out_dtype, use_fast_accum)
    return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype,
                            use_fast_accum=use_fast_accum)


class Float8Matmul(torch.autograd.Function):
    """y [M, N] = x [M, K] · w [N, K]ᵀ with tensorwise-scaled float8 operands in all three GEMMs."""

    @staticmethod
    def forward(ctx, x, w, emulate):
        x = x.contiguous()
        x8, x_inv = quantize(x, E4M3, emulate)
        w8, w_inv = quantize(w, E4M3, emulate)
        ctx.save_for_backward(x8, x_inv, w8, w_inv)
        ctx.emulate, ctx.x_dtype, ctx.w_dtype = emulate, x.dtype, w.dtype
        return scaled_mm(x8, w8.t(), x_inv, w_inv, x.dtype, True, emulate)

    @staticmethod
    def backward(ctx, grad_y):
        x8, x_inv, w8, w_inv = ctx.saved_tensors
        g8, g_inv = quantize(grad_y.contiguous(), E5M2, ctx.emulate)
        grad_x = scaled_mm(g8, w8.t().contiguous().t(), g_inv, w_inv, ctx.x_dtype, False, ctx.emulate)
        grad_w = scaled_mm(g8.t().contiguous(), x8.t().contiguous().t(), g_inv, x_inv, grad_y.dtype,
                           False, ctx.emulate)
        return grad_x, grad_w.to(ctx.w_dtype), None


class Float8Linear(nn.Linear):
    """nn.Linear whose GEMMs run in float8 (Float8Matmul); same parameters, same state_dict.
    compute_dtype: the dtype x is cast to first and y comes out in (bf16 in the peers, as autocast
    feeds nn.Linear; None keeps x's)."""

    emulate = False
    compute_dtype = None

    def forward(self, x):
        if self.compute_dtype is not None:
            x = x.to(self.compute_dtype)
        y = Float8Matmul.apply(x.reshape(-1, x.shape[-1]), self.weight, self.emulate)
        y = y.view(*x.shape[:-1], y.shape[-1])
        return y if self.bias is None else y + self.bias.to(y.dtype)


def convert_linears(module, emulate=False, skip=("router",), compute_dtype=None):
    """Turns every nn.Linear under module into a Float8Linear in place (the same parameter objects),
    except children named in skip (the MoE router: 64 outputs, kept bf16 as torchtitan keeps it);
    returns how many. The peers pass their blocks only: embedding and output layer stay bf16."""
    count = 0
    for name, child in module.named_children():
        if name in skip:
            continue
        if type(child) is nn.Linear:
            if child.in_features % 16 or child.out_features % 16:
                raise ValueError(f"{name}: scaled_mm needs dimensions that are multiples of 16, "
                                 f"got {child.in_features} -> {child.out_features}")
            child.__class__ = Float8Linear
            child.emulate, child.compute_dtype = emulate, compute_dtype
            count += 1
        else:
            count += convert_linears(child, emulate, skip, compute_dtype)
    return count
