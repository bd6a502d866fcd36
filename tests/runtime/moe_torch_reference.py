#!/usr/bin/env python3
"""PyTorch reference values for tetra's mixture-of-experts ops (runtime/ops.h, moe_*).

The router is Hugging Face's DeepseekV3TopkRouter (transformers' modeling_deepseek_v3.py) written out:
sigmoid scores, group-limited top-k of the biased scores (0.0 for the experts of ineligible groups),
weights normalised to sum 1 (+1e-20) times routed_scaling_factor; the MoE layer is its
DeepseekV3MoE.moe loop over experts (SwiGLU experts, index_add of the weighted outputs). Everything in
float64 from fp32 inputs; autograd gives the gradients. The sequence-wise balance loss is
DeepSeek-V3's: alpha · Σ_i f_i·P_i per sequence, f_i = E/(k·T)·(slots routed to i), P_i = mean_t s_i/Σ_e s_e.

Layout: /router/<k> and /moe_layer/<k> with fp32 inputs, float64 expectations, sizes as attributes.
Expert ids are stored best first (masked biased score descending, then index).

Usage: moe_torch_reference.py --seed 1 --out FILE.h5
"""
import argparse

import h5py
import numpy as np
import torch
import torch.nn.functional as F


class Inputs:
    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def randn(self, *shape, scale=1.0, offset=0.0):
        x = torch.randn(*shape, generator=self.g, dtype=torch.float64) * scale + offset
        x = torch.where(x == 0, torch.full_like(x, 1e-3), x)
        return x.float().double()  # exactly representable in fp32


def fp32(t):
    return t.detach().to(torch.float32).numpy()


def f64(t):
    return t.detach().to(torch.float64).numpy()


def new_case(f, op):
    grp = f.require_group(op)
    k = int(grp.attrs.get("n_cases", 0))
    grp.attrs["n_cases"] = k + 1
    return grp.create_group(str(k))


def put(case, **arrays):
    for name, a in arrays.items():
        case.create_dataset(name, data=a)


def hf_topk_indices(scores, bias, k, n_group, topk_group):
    """DeepseekV3TopkRouter.get_topk_indices, then sorted best first for a stable comparison."""
    N, E = scores.shape
    choice = scores + bias.unsqueeze(0)
    group_scores = choice.view(N, n_group, E // n_group).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(N, n_group, E // n_group).reshape(N, E)
    choice = choice.masked_fill(~score_mask.bool(), 0.0)
    idx = torch.topk(choice, k=k, dim=-1, sorted=False)[1]
    # best first; equal scores by index (random inputs have none)
    key = choice.gather(1, idx)
    order = torch.argsort(-key, dim=-1, stable=True)
    return idx.gather(1, order)


def hf_weights(scores, idx, route_scale):
    w = scores.gather(1, idx)
    return w / (w.sum(dim=-1, keepdim=True) + 1e-20) * route_scale


def balance_loss(scores, idx, E, k, T):
    """Σ over sequences of Σ_i f_i·P_i (f from the selection, not differentiated)."""
    N = scores.shape[0]
    B = N // T
    counts = F.one_hot(idx, E).sum(dim=1).view(B, T, E).sum(dim=1).double()  # [B, E]
    f = E / (k * T) * counts
    P = (scores / scores.sum(dim=-1, keepdim=True)).view(B, T, E).mean(dim=1)
    return (f * P).sum(), f


def router_cases(f, r):
    # N, E, k, n_group, topk_group, route_scale, seq_len (balance loss)
    for N, E, k, n_group, topk_group, scale, T in [(37, 16, 4, 1, 1, 1.0, 37), (48, 32, 6, 4, 2, 2.5, 12),
                                                  (40, 64, 6, 8, 3, 1.0, 8), (16, 8, 2, 1, 1, 1.0, 4),
                                                  (30, 64, 8, 8, 4, 2.5, 10)]:
        logits = r.randn(N, E, scale=2.0).requires_grad_()
        bias = r.randn(E, scale=0.05)
        dw = r.randn(N, k)
        loss_scale, grad_scale = 0.37, 0.013
        scores = logits.sigmoid()
        idx = hf_topk_indices(scores.detach(), bias, k, n_group, topk_group)
        w = hf_weights(scores, idx, scale)
        bal, fsel = balance_loss(scores, idx, E, k, T)
        (w * dw).sum().backward(retain_graph=True)
        d_logits = logits.grad.clone()
        logits.grad = None
        ((w * dw).sum() + grad_scale * bal).backward()
        c = new_case(f, "router")
        c.attrs.update(N=N, E=E, k=k, n_group=n_group, topk_group=topk_group, route_scale=scale, seq_len=T,
                       loss_scale=loss_scale, grad_scale=grad_scale)
        counts = torch.bincount(idx.reshape(-1), minlength=E)
        put(c, logits=fp32(logits), bias=fp32(bias), d_weights=fp32(dw), expert_ids=idx.to(torch.int32).numpy(),
            weights=f64(w), counts=counts.to(torch.int32).numpy(), d_logits=f64(d_logits),
            balance_loss=np.array([float(loss_scale * bal)]), d_prob_sums=f64(grad_scale * fsel / T),
            d_logits_balance=f64(logits.grad))


def moe_layer_cases(f, r):
    """DeepseekV3MoE's routed experts (no shared experts): y = Σ_j w_j · expert_{id_j}(x), experts
    SwiGLU down(silu(gate(x))·up(x)), the gate an fp32 linear [E, d]."""
    for N, d, E, k, Fe, n_group, topk_group, scale in [(24, 16, 8, 2, 12, 2, 1, 2.0), (40, 24, 16, 4, 8, 4, 2, 1.0)]:
        x = r.randn(N, d).requires_grad_()
        gate_w = r.randn(E, d, scale=0.5).requires_grad_()
        bias = r.randn(E, scale=0.05)
        wg = r.randn(E, Fe, d, scale=d ** -0.5).requires_grad_()
        wu = r.randn(E, Fe, d, scale=d ** -0.5).requires_grad_()
        wd = r.randn(E, d, Fe, scale=Fe ** -0.5).requires_grad_()
        dy = r.randn(N, d)
        scores = (x @ gate_w.t()).sigmoid()
        idx = hf_topk_indices(scores.detach(), bias, k, n_group, topk_group)
        w = hf_weights(scores, idx, scale)
        y = torch.zeros(N, d, dtype=torch.float64)
        expert_mask = F.one_hot(idx, num_classes=E).permute(2, 0, 1)
        for e in range(E):
            tok, slot = torch.where(expert_mask[e])
            if tok.numel() == 0:
                continue
            xe = x[tok]
            out = (F.silu(xe @ wg[e].t()) * (xe @ wu[e].t())) @ wd[e].t()
            y = y.index_add(0, tok, out * w[tok, slot].unsqueeze(-1))
        y.backward(dy)
        c = new_case(f, "moe_layer")
        c.attrs.update(N=N, d=d, E=E, k=k, F=Fe, n_group=n_group, topk_group=topk_group, route_scale=scale)
        put(c, x=fp32(x), gate_w=fp32(gate_w), bias=fp32(bias), w_gate=fp32(wg), w_up=fp32(wu), w_down=fp32(wd),
            dy=fp32(dy), y=f64(y), dx=f64(x.grad), d_gate_w=f64(gate_w.grad), d_w_gate=f64(wg.grad),
            d_w_up=f64(wu.grad), d_w_down=f64(wd.grad), expert_ids=idx.to(torch.int32).numpy())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    r = Inputs(args.seed)
    with h5py.File(args.out, "w") as f:
        f.attrs["seed"] = args.seed
        for make in (router_cases, moe_layer_cases):
            make(f, r)


if __name__ == "__main__":
    main()
