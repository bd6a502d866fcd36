#!/usr/bin/env python3
"""PyTorch reference values for tetra's op library (runtime/ops.h).

Given a seed, builds random inputs for every op at a few shapes, runs forward and backward in
float64 (inputs are fp32 values, so both sides start from the same numbers) and writes inputs and
expected outputs/gradients to one HDF5 file that tests/runtime/torch_compare_test.cpp reads.

Layout: one group per op (/linear, /gelu, ...) with attribute n_cases and subgroups "0", "1", ...
Each case holds fp32 inputs, float64 expected values (bf16 results as uint16 bits), and its sizes
as attributes.

Usage: torch_reference.py --seed 1 --out FILE.h5
"""
import argparse
import math

import h5py
import numpy as np
import torch
import torch.nn.functional as F


class Inputs:
    """Random inputs from one seeded generator: fp32 values held as float64 tensors, never 0."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def randn(self, *shape, scale=1.0, offset=0.0):
        x = torch.randn(*shape, generator=self.g, dtype=torch.float64) * scale + offset
        x = torch.where(x == 0, torch.full_like(x, 1e-3), x)
        return x.float().double()  # exactly representable in fp32

    def randint(self, lo, hi, *shape):
        return torch.randint(lo, hi, shape, generator=self.g, dtype=torch.int64)


def fp32(t):
    return t.detach().to(torch.float32).numpy()


def f64(t):
    return t.detach().to(torch.float64).numpy()


def i32(t):
    return t.detach().to(torch.int32).numpy()


def bf16_bits(t):
    """uint16 bit patterns of t rounded to bfloat16 (round to nearest even) by PyTorch."""
    return t.detach().to(torch.float32).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def new_case(f, op):
    grp = f.require_group(op)
    k = int(grp.attrs.get("n_cases", 0))
    grp.attrs["n_cases"] = k + 1
    return grp.create_group(str(k))


def put(case, **arrays):
    for name, a in arrays.items():
        case.create_dataset(name, data=a)


def linear_cases(f, r):
    for n, i, o in [(6, 5, 7), (33, 64, 48)]:
        for bias in (True, False):
            for gelu in (False, True):
                x = r.randn(n, i).requires_grad_()
                w = r.randn(o, i, scale=1 / math.sqrt(i)).requires_grad_()
                b = r.randn(o, scale=0.5).requires_grad_()
                dy = r.randn(n, o)
                pre = x @ w.t() + (b if bias else 0)
                y = F.gelu(pre, approximate="tanh") if gelu else pre
                y.backward(dy)
                c = new_case(f, "linear")
                c.attrs.update(N=n, I=i, O=o, bias=int(bias), gelu=int(gelu))
                put(c, x=fp32(x), w=fp32(w), b=fp32(b), dy=fp32(dy), y=f64(y), pre_act=f64(pre), dx=f64(x.grad),
                    dw=f64(w.grad), db=f64(b.grad) if bias else np.zeros(o))


def linear_residual_cases(f, r):
    """y = x·wᵀ + b + residual: a projection with the residual connection fused in."""
    for n, i, o, bias in [(6, 5, 7, True), (33, 64, 48, True), (9, 16, 8, False)]:
        x = r.randn(n, i)
        w = r.randn(o, i, scale=1 / math.sqrt(i))
        b = r.randn(o, scale=0.5)
        res = r.randn(n, o, scale=2.0)
        y = x @ w.t() + (b if bias else 0) + res
        c = new_case(f, "linear_residual")
        c.attrs.update(N=n, I=i, O=o, bias=int(bias))
        put(c, x=fp32(x), w=fp32(w), b=fp32(b), residual=fp32(res), y=f64(y))


def gelu_cases(f, r):
    for shape in [(4, 9), (3, 5, 17)]:
        x = r.randn(*shape, scale=2.5).requires_grad_()
        dy = r.randn(*shape)
        y = F.gelu(x, approximate="tanh")
        y.backward(dy)
        c = new_case(f, "gelu")
        put(c, x=fp32(x), dy=fp32(dy), y=f64(y), dx=f64(x.grad))


def layernorm_cases(f, r):
    for shape in [(5, 8), (2, 8, 96)]:
        C = shape[-1]
        eps = 1e-5
        x = r.randn(*shape, scale=2.0, offset=0.7).requires_grad_()
        w = r.randn(C, scale=0.3, offset=1.0).requires_grad_()
        b = r.randn(C, scale=0.2).requires_grad_()
        dy = r.randn(*shape)
        y = F.layer_norm(x, (C,), w, b, eps)
        y.backward(dy)
        mean = x.detach().mean(-1)
        rstd = 1.0 / torch.sqrt(x.detach().var(-1, unbiased=False) + eps)
        c = new_case(f, "layernorm")
        c.attrs.update(eps=eps)
        put(c, x=fp32(x), w=fp32(w), b=fp32(b), dy=fp32(dy), y=f64(y), mean=f64(mean), rstd=f64(rstd),
            dx=f64(x.grad), dw=f64(w.grad), db=f64(b.grad))


def layernorm_residual_cases(f, r):
    """x feeds both a LayerNorm and another path whose gradient w.r.t. x is dresidual:
    loss = Σ LN(x)·dy + Σ x·dresidual, so x.grad = dresidual + the gradient through the LayerNorm."""
    for shape in [(5, 8), (3, 4, 40)]:
        C = shape[-1]
        eps = 1e-5
        x = r.randn(*shape, scale=1.5, offset=-0.4).requires_grad_()
        w = r.randn(C, scale=0.3, offset=1.0).requires_grad_()
        b = r.randn(C, scale=0.2).requires_grad_()
        dy = r.randn(*shape)
        dres = r.randn(*shape, scale=0.7)
        y = F.layer_norm(x, (C,), w, b, eps)
        ((y * dy).sum() + (x * dres).sum()).backward()
        mean = x.detach().mean(-1)
        rstd = 1.0 / torch.sqrt(x.detach().var(-1, unbiased=False) + eps)
        c = new_case(f, "layernorm_residual")
        c.attrs.update(eps=eps)
        put(c, x=fp32(x), w=fp32(w), b=fp32(b), dy=fp32(dy), dresidual=fp32(dres), mean=f64(mean), rstd=f64(rstd),
            dx=f64(x.grad), dw=f64(w.grad), db=f64(b.grad))


def embedding_cases(f, r):
    for B, T, V, C, P, pos in [(2, 5, 11, 6, 8, True), (3, 16, 50, 32, 16, True), (2, 4, 7, 5, 4, False)]:
        ids = r.randint(0, V, B, T)
        wte = r.randn(V, C).requires_grad_()
        wpe = r.randn(P, C, scale=0.1).requires_grad_()
        dy = r.randn(B, T, C)
        y = wte[ids] + (wpe[:T].unsqueeze(0) if pos else 0)
        y.backward(dy)
        c = new_case(f, "embedding")
        c.attrs.update(B=B, T=T, V=V, C=C, pos=int(pos))
        put(c, ids=i32(ids), wte=fp32(wte), wpe=fp32(wpe), dy=fp32(dy), y=f64(y), dwte=f64(wte.grad),
            dwpe=f64(wpe.grad) if pos else np.zeros((P, C)))


def attention_cases(f, r):
    for B, T, H, D in [(1, 1, 1, 4), (2, 7, 2, 8), (2, 16, 3, 4), (1, 64, 4, 16)]:
        qkv = r.randn(B, T, 3 * H * D, scale=1.5).requires_grad_()
        dout = r.randn(B, T, H * D)
        q, k, v = qkv.view(B, T, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, T, D]
        s = q @ k.transpose(-1, -2) / math.sqrt(D)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        lse = torch.logsumexp(s, -1)  # [B, H, T]
        out = (torch.softmax(s, -1) @ v).permute(0, 2, 1, 3).reshape(B, T, H * D)
        out.backward(dout)
        c = new_case(f, "attention")
        c.attrs.update(B=B, T=T, H=H, D=D)
        put(c, qkv=fp32(qkv), dout=fp32(dout), out=f64(out), lse=f64(lse), dqkv=f64(qkv.grad))


def cross_entropy_cases(f, r):
    for N, V, offset in [(6, 10, 0.0), (32, 300, 100.0)]:
        logits = r.randn(N, V, scale=3.0, offset=offset).requires_grad_()
        targets = r.randint(0, V, N)
        targets[1] = -1  # ignored rows: any negative target
        targets[N - 2] = -100
        grad_scale = 0.37
        kept = targets >= 0
        picked = logits.gather(1, targets.clamp(min=0).unsqueeze(1)).squeeze(1)
        losses = torch.where(kept, torch.logsumexp(logits, -1) - picked, torch.zeros(N, dtype=torch.float64))
        (losses.sum() * grad_scale).backward()
        c = new_case(f, "cross_entropy")
        c.attrs.update(N=N, V=V, grad_scale=grad_scale)
        put(c, logits=fp32(logits), targets=i32(targets), losses=f64(losses), dlogits=f64(logits.grad))


def adamw_cases(f, r):
    for n, bf16 in [(7, False), (129, True)]:
        steps, lr, betas, eps, wd, grad_scale = 3, 1e-2, (0.9, 0.95), 1e-8, 0.1, 0.5
        p0 = r.randn(n)
        grads = r.randn(steps, n, scale=0.3)
        if bf16:  # gradients held in bf16: the values tetra reads are the rounded ones
            grads = grads.float().to(torch.bfloat16).double()
        p = torch.nn.Parameter(p0.clone())
        opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=wd)
        for s in range(steps):
            p.grad = grads[s] * grad_scale
            opt.step()
        st = opt.state[p]
        c = new_case(f, "adamw")
        c.attrs.update(n=n, steps=steps, lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=wd,
                       grad_scale=grad_scale, bf16=int(bf16))
        put(c, p0=fp32(p0), grads=fp32(grads), master=f64(p), m=f64(st["exp_avg"]), v=f64(st["exp_avg_sq"]))


def sum_squares_cases(f, r):
    for shape, bf16 in [((1000,), False), ((3, 7), False), ((257,), True)]:
        x = r.randn(*shape, scale=1.3)
        if bf16:
            x = x.float().to(torch.bfloat16).double()
        acc0 = r.randn(1).abs()
        c = new_case(f, "sum_squares")
        c.attrs.update(bf16=int(bf16))
        put(c, x=fp32(x), acc0=fp32(acc0), acc=f64(acc0 + (x * x).sum()))


def elementwise_cases(f, r):
    for shape in [(5, 7), (2, 3, 33)]:
        a, b, x = r.randn(*shape), r.randn(*shape, scale=4.0), r.randn(*shape)
        s = -1.7
        c = new_case(f, "elementwise")
        c.attrs.update(s=s)
        # scale runs in fp32 on the tensor: the expected value is the fp32 product.
        put(c, a=fp32(a), b=fp32(b), add=f64(a + b), x=fp32(x), scaled=f64((x.float() * np.float32(s)).double()))


def copy_cases(f, r):
    specials = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0xBF818000, 0x7F7FFFFF, 0x7F800000,
                         0xFF800000, 0x80000000, 0x00000001, 0x00800000, 0x007FFFFF, 0x477FE000, 0x477FF000],
                        dtype=np.uint32).view(np.float32)
    x = np.concatenate([specials, fp32(r.randn(300, scale=1e3)), fp32(r.randn(300, scale=1e-3))])
    # random bf16 bit patterns, NaNs left out (their payload is not part of the contract)
    bits = i32(r.randint(0, 1 << 16, 500)).astype(np.uint16)
    bits = bits[(bits & 0x7F80) != 0x7F80]
    xb = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16).to(torch.float32)
    c = new_case(f, "copy")
    put(c, fp32_in=x, bf16_out=bf16_bits(torch.from_numpy(x)), bf16_in=bits, fp32_out=xb.numpy())


def rmsnorm_cases(f, r):
    """Hugging Face's LlamaRMSNorm in float64: y = w·x/√(mean(x²) + eps). The second case has a
    dresidual: x also feeds another path whose gradient w.r.t. x is dresidual (a pre-norm residual)."""
    for shape, eps, residual in [((5, 8), 1e-5, False), ((2, 8, 96), 1e-6, False), ((3, 4, 40), 1e-5, True)]:
        C = shape[-1]
        x = r.randn(*shape, scale=1.5, offset=0.3).requires_grad_()
        w = r.randn(C, scale=0.3, offset=1.0).requires_grad_()
        dy = r.randn(*shape)
        dres = r.randn(*shape, scale=0.7)
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        y = w * (x * rstd)
        loss = (y * dy).sum() + ((x * dres).sum() if residual else 0)
        loss.backward()
        c = new_case(f, "rmsnorm")
        c.attrs.update(eps=eps, residual=int(residual))
        put(c, x=fp32(x), w=fp32(w), dy=fp32(dy), dresidual=fp32(dres), y=f64(y), rstd=f64(rstd.squeeze(-1)),
            dx=f64(x.grad), dw=f64(w.grad))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_cases(f, r):
    """transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb on the q and k heads of a fused
    qkv [B, T, (H + 2·Hkv)·D]: inv_freq and the angles t·inv_freq in fp32 as transformers computes them,
    then cos, sin and the rotation in float64. The backward is autograd's gradient through it."""
    for B, T, H, Hkv, D, theta in [(2, 7, 4, 2, 8, 10000.0), (1, 16, 3, 1, 16, 500000.0), (2, 5, 2, 2, 4, 10000.0),
                                   (1, 40, 2, 1, 64, 500000.0)]:
        inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))  # fp32
        angles = torch.arange(T, dtype=torch.int64).float()[:, None] * inv_freq[None, :]  # fp32 [T, D/2]
        emb = torch.cat((angles, angles), dim=-1).double()  # [T, D]
        cos, sin = emb.cos(), emb.sin()
        qkv = r.randn(B, T, (H + 2 * Hkv) * D, scale=1.2).requires_grad_()
        dy = r.randn(B, T, (H + 2 * Hkv) * D)
        heads = qkv.view(B, T, H + 2 * Hkv, D)
        qk, v = heads[:, :, :H + Hkv], heads[:, :, H + Hkv:]
        qk_rot = qk * cos[None, :, None, :] + rotate_half(qk) * sin[None, :, None, :]
        y = torch.cat((qk_rot, v), dim=2).reshape(B, T, -1)
        y.backward(dy)
        c = new_case(f, "rope")
        c.attrs.update(B=B, T=T, H=H, Hkv=Hkv, D=D, theta=theta)
        put(c, qkv=fp32(qkv), dy=fp32(dy), y=f64(y), dqkv=f64(qkv.grad))


def swiglu_cases(f, r):
    """h = silu(gate)·up on gu = [gate | up] (Llama's MLP between its projections)."""
    for shape in [(5, 12), (3, 4, 40)]:
        gu = r.randn(*shape, scale=2.0).requires_grad_()
        F_ = shape[-1] // 2
        dh = r.randn(*shape[:-1], F_)
        h = F.silu(gu[..., :F_]) * gu[..., F_:]
        h.backward(dh)
        c = new_case(f, "swiglu")
        put(c, gate_up=fp32(gu), dh=fp32(dh), h=f64(h), d_gate_up=f64(gu.grad))


def gqa_attention_cases(f, r):
    """Causal attention with grouped-query heads: qkv [B, T, (H + 2·Hkv)·D], query head h reads
    key/value head h // (H / Hkv) (transformers' repeat_kv)."""
    for B, T, H, Hkv, D in [(2, 7, 4, 2, 8), (1, 16, 4, 1, 4), (2, 9, 6, 3, 8), (1, 33, 8, 8, 16),
                            (1, 24, 8, 2, 16)]:
        qkv = r.randn(B, T, (H + 2 * Hkv) * D, scale=1.5).requires_grad_()
        dout = r.randn(B, T, H * D)
        heads = qkv.view(B, T, H + 2 * Hkv, D).permute(0, 2, 1, 3)  # [B, heads, T, D]
        q, k, v = heads[:, :H], heads[:, H:H + Hkv], heads[:, H + Hkv:]
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        s = q @ k.transpose(-1, -2) / math.sqrt(D)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        lse = torch.logsumexp(s, -1)  # [B, H, T]
        out = (torch.softmax(s, -1) @ v).permute(0, 2, 1, 3).reshape(B, T, H * D)
        out.backward(dout)
        c = new_case(f, "gqa_attention")
        c.attrs.update(B=B, T=T, H=H, Hkv=Hkv, D=D)
        put(c, qkv=fp32(qkv), dout=fp32(dout), out=f64(out), lse=f64(lse), dqkv=f64(qkv.grad))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    r = Inputs(args.seed)
    with h5py.File(args.out, "w") as f:
        f.attrs["seed"] = args.seed
        f.attrs["torch_version"] = str(torch.__version__).encode()
        for make in (linear_cases, gelu_cases, layernorm_cases, embedding_cases, attention_cases, cross_entropy_cases,
                     adamw_cases, sum_squares_cases, elementwise_cases, copy_cases, linear_residual_cases,
                     layernorm_residual_cases, rmsnorm_cases, rope_cases, swiglu_cases, gqa_attention_cases):
            make(f, r)


if __name__ == "__main__":
    main()
