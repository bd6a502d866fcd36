#!/usr/bin/env python3
"""PyTorch oracle for tetra's Llama with DeepSeek-V3 mixture-of-experts MLPs (model.moe): written
independently in torch (float64) from Hugging Face's parameter names. Attention as transformers'
LlamaDecoderLayer; the MoE MLP as transformers' DeepseekV3MoE / DeepseekV3TopkRouter: fp32 (here
fp64) router logits, sigmoid scores s, experts chosen by the top-k of s + e_score_correction_bias
with group-limited routing (a group scores the sum of its two best biased scores; only the
topk_group best groups stay eligible, the others' choice scores are masked to 0.0), weights = the
chosen s normalised to sum 1 (+1e-20) times routed_scaling_factor, dropless; plus the shared
experts. Ties in a choice go to the lower index (tetra's rule; random data has none).

Training adds DeepSeek-V3's sequence-wise balance loss alpha * sum_i f_i * P_i of each sequence
(f_i = E/(k*T) * the sequence's slots routed to i, P_i = mean over its tokens of s_i / sum_j s_j),
averaged over the global batch's sequences, for every MoE layer; after each AdamW step the bias
moves by rate * sign(mean load - load_i), loads counted over the step's global batch.

Writes into OUT_DIR:
  weights.h5  consolidated checkpoint (HF names, `arch` and config attributes), initial bias included
  hf/         the same as a Hugging Face folder (config.json + model.safetensors, F32)
  tokens.h5   a token dataset
  ref.h5      loss0 and every tensor's gradient (grad/NAME) of the first global batch (loss0
              includes the balance loss); the losses, gradient norms and per-layer loads of STEPS
              AdamW steps with bias updates; the weights and biases after them (final/NAME)
"""
import argparse, json, math, os, sys

import h5py, numpy as np, torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_reference import save  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("out_dir")
p.add_argument("--vocab", type=int, default=96)
p.add_argument("--seq", type=int, default=16)
p.add_argument("--dim", type=int, default=32)
p.add_argument("--layers", type=int, default=2)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--kv-heads", type=int, default=2)
p.add_argument("--ffn", type=int, default=48)
p.add_argument("--experts", type=int, default=8)
p.add_argument("--topk", type=int, default=2)
p.add_argument("--shared", type=int, default=1)
p.add_argument("--moe-ffn", type=int, default=16)
p.add_argument("--dense-layers", type=int, default=1)
p.add_argument("--route-scale", type=float, default=1.0)
p.add_argument("--groups", type=int, default=1)
p.add_argument("--topk-groups", type=int, default=1)
p.add_argument("--bias-rate", type=float, default=1e-3)
p.add_argument("--aux", type=float, default=0.0)
p.add_argument("--rope-theta", type=float, default=10000.0)
p.add_argument("--eps", type=float, default=1e-5)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--min_lr", type=float, default=3e-4)
p.add_argument("--wd", type=float, default=0.1)
p.add_argument("--clip", type=float, default=0.5)
p.add_argument("--betas", type=float, nargs=2, default=[0.9, 0.95])
p.add_argument("--adam-eps", type=float, default=1e-8)
p.add_argument("--seed", type=int, default=7)
a = p.parse_args()
os.makedirs(os.path.join(a.out_dir, "hf"), exist_ok=True)
rng = np.random.default_rng(a.seed)
dt = torch.float64
V, T, C, L, H, Hkv, FF = a.vocab, a.seq, a.dim, a.layers, a.heads, a.kv_heads, a.ffn
E, K, FE, FS = a.experts, a.topk, a.moe_ffn, a.shared * a.moe_ffn
D = C // H

def is_moe(i):
    return i >= a.dense_layers

# ---- weights, Hugging Face names, [out, in] -----------------------------------------------------
W, BUF = {}, {}
def rand(*shape, std=0.02, mean=0.0):
    return rng.normal(mean, std, size=shape)
W["model.embed_tokens.weight"] = rand(V, C, std=0.5)
for i in range(L):
    h = f"model.layers.{i}."
    W[h + "input_layernorm.weight"] = rand(C, std=0.1, mean=1.0)
    W[h + "self_attn.q_proj.weight"] = rand(H * D, C, std=0.2)
    W[h + "self_attn.k_proj.weight"] = rand(Hkv * D, C, std=0.2)
    W[h + "self_attn.v_proj.weight"] = rand(Hkv * D, C, std=0.2)
    W[h + "self_attn.o_proj.weight"] = rand(C, H * D, std=0.1)
    W[h + "post_attention_layernorm.weight"] = rand(C, std=0.1, mean=1.0)
    if is_moe(i):
        W[h + "mlp.gate.weight"] = rand(E, C, std=0.3)
        BUF[h + "mlp.gate.e_score_correction_bias"] = rand(E, std=0.05)
        for e in range(E):
            W[h + f"mlp.experts.{e}.gate_proj.weight"] = rand(FE, C, std=0.2)
            W[h + f"mlp.experts.{e}.up_proj.weight"] = rand(FE, C, std=0.2)
            W[h + f"mlp.experts.{e}.down_proj.weight"] = rand(C, FE, std=0.1)
        if FS:
            W[h + "mlp.shared_experts.gate_proj.weight"] = rand(FS, C, std=0.2)
            W[h + "mlp.shared_experts.up_proj.weight"] = rand(FS, C, std=0.2)
            W[h + "mlp.shared_experts.down_proj.weight"] = rand(C, FS, std=0.1)
    else:
        W[h + "mlp.gate_proj.weight"] = rand(FF, C, std=0.2)
        W[h + "mlp.up_proj.weight"] = rand(FF, C, std=0.2)
        W[h + "mlp.down_proj.weight"] = rand(C, FF, std=0.1)
W["model.norm.weight"] = rand(C, std=0.1, mean=1.0)
W["lm_head.weight"] = rand(V, C, std=0.1)
W = {k: v.astype(np.float32) for k, v in W.items()}  # tetra starts from exactly these fp32 values
BUF = {k: v.astype(np.float32) for k, v in BUF.items()}

config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
          "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": Hkv, "intermediate_size": FF,
          "rope_theta": a.rope_theta, "rms_norm_eps": a.eps, "tie_word_embeddings": False,
          "max_position_embeddings": T, "hidden_act": "silu", "torch_dtype": "float32",
          "n_routed_experts": E, "num_experts_per_tok": K, "n_shared_experts": a.shared, "moe_intermediate_size": FE,
          "first_k_dense_replace": a.dense_layers, "n_group": a.groups, "topk_group": a.topk_groups,
          "routed_scaling_factor": a.route_scale, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
          "norm_topk_prob": True}
with h5py.File(os.path.join(a.out_dir, "weights.h5"), "w") as f:
    for k, v in list(W.items()) + list(BUF.items()):
        f[k] = v
    f.attrs["arch"] = "llama"
    for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "intermediate_size", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
              "moe_intermediate_size", "first_k_dense_replace", "n_group", "topk_group"):
        f.attrs[k] = np.int64(config[k])
    f.attrs["tie_word_embeddings"] = np.int64(0)
    f.attrs["rope_theta"] = a.rope_theta
    f.attrs["rms_norm_eps"] = a.eps
    f.attrs["routed_scaling_factor"] = a.route_scale
save(os.path.join(a.out_dir, "hf", "model.safetensors"), {**W, **BUF}, {"format": "pt"})
with open(os.path.join(a.out_dir, "hf", "config.json"), "w") as f:
    json.dump(config, f, indent=2)
params = {k: torch.tensor(v, dtype=dt, requires_grad=True) for k, v in W.items()}
bias = {k: torch.tensor(v, dtype=dt) for k, v in BUF.items()}

# ---- data -----------------------------------------------------------------------------------------
tokens = rng.integers(0, V, size=a.batch * a.steps * T + 1).astype(np.uint16)
with h5py.File(os.path.join(a.out_dir, "tokens.h5"), "w") as f:
    f.create_dataset("tokens", data=tokens)
    f.attrs["vocab_size"] = V
    f.attrs["tokenizer"] = "random"

def batch(step):  # shuffle off: step s uses windows [s·B, (s+1)·B), window w starts at w·T
    xs, ys = [], []
    for w in range(step * a.batch, (step + 1) * a.batch):
        win = tokens[w * T: w * T + T + 1].astype(np.int64)
        xs.append(win[:-1]); ys.append(win[1:])
    return torch.tensor(np.stack(xs)), torch.tensor(np.stack(ys))

# ---- the model --------------------------------------------------------------------------------------
def rms_norm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + a.eps))

def rotate_half(x):
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat((-x2, x1), dim=-1)

inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
ang = torch.outer(torch.arange(T, dtype=dt), inv_freq.to(dt))
emb = torch.cat((ang, ang), dim=-1)
cos, sin = emb.cos()[None, None], emb.sin()[None, None]

def repeat_kv(x, n):  # [B, Hkv, T, D] -> [B, Hkv·n, T, D]
    return x[:, :, None].expand(x.shape[0], x.shape[1], n, x.shape[2], x.shape[3]).reshape(
        x.shape[0], x.shape[1] * n, x.shape[2], x.shape[3])

def ordered_topk(values, k):
    """Indices of the k largest entries of each row, largest first, ties to the lower index."""
    v = values.detach().numpy()
    idx = np.lexsort((np.broadcast_to(np.arange(v.shape[1]), v.shape), -v), axis=1)[:, :k]
    return torch.tensor(idx)

def choose(scores, b):  # DeepseekV3TopkRouter.get_topk_indices, no gradient
    c = scores.detach() + b[None, :]
    gs = E // a.groups
    group_scores = c.view(-1, a.groups, gs).topk(2, dim=-1)[0].sum(dim=-1)
    groups = ordered_topk(group_scores, a.topk_groups)
    mask = torch.zeros_like(group_scores)
    mask.scatter_(1, groups, 1)
    mask = mask[:, :, None].expand(-1, a.groups, gs).reshape(-1, E)
    c = c.masked_fill(mask == 0, 0.0)
    return ordered_topk(c, K)

def swiglu(x, gate, up, down):
    return (F.silu(x @ gate.t()) * (x @ up.t())) @ down.t()

def moe_mlp(P, h, y, B_, T_, loads, aux_terms):
    x = y.reshape(-1, C)
    logits = x @ P[h + "mlp.gate.weight"].t()
    scores = logits.sigmoid()
    idx = choose(scores, bias[h + "mlp.gate.e_score_correction_bias"])
    w = scores.gather(1, idx)
    w = w / (w.sum(-1, keepdim=True) + 1e-20) * a.route_scale
    out = torch.zeros_like(x)
    for e in range(E):
        tok, slot = torch.where(idx == e)
        if tok.numel():
            ex = h + f"mlp.experts.{e}."
            o = swiglu(x[tok], P[ex + "gate_proj.weight"], P[ex + "up_proj.weight"], P[ex + "down_proj.weight"])
            out = out.index_add(0, tok, o * w[tok, slot][:, None])
    counts = torch.bincount(idx.reshape(-1), minlength=E)
    loads[h] = loads.get(h, 0) + counts.numpy()
    if a.aux > 0:
        sel = F.one_hot(idx, E).sum(1).to(dt).view(B_, T_, E)  # slots per token and expert
        f = E / (K * T_) * sel.sum(1)                           # [B, E]
        Pm = (scores / scores.sum(-1, keepdim=True)).view(B_, T_, E).mean(1)
        aux_terms.append(a.aux * (f * Pm).sum(-1))              # [B]
    if FS:
        s = h + "mlp.shared_experts."
        out = out + swiglu(x, P[s + "gate_proj.weight"], P[s + "up_proj.weight"], P[s + "down_proj.weight"])
    return out.view(B_, T_, C)

def forward(P, idx, tgt, loads):
    B_, T_ = idx.shape
    x = P["model.embed_tokens.weight"][idx]
    mask = torch.tril(torch.ones(T_, T_, dtype=torch.bool))
    aux_terms = []
    for i in range(L):
        h = f"model.layers.{i}."
        y = rms_norm(x, P[h + "input_layernorm.weight"])
        q = (y @ P[h + "self_attn.q_proj.weight"].t()).view(B_, T_, H, D).transpose(1, 2)
        k = (y @ P[h + "self_attn.k_proj.weight"].t()).view(B_, T_, Hkv, D).transpose(1, 2)
        v = (y @ P[h + "self_attn.v_proj.weight"].t()).view(B_, T_, Hkv, D).transpose(1, 2)
        q = q * cos[:, :, :T_] + rotate_half(q) * sin[:, :, :T_]
        k = k * cos[:, :, :T_] + rotate_half(k) * sin[:, :, :T_]
        k, v = repeat_kv(k, H // Hkv), repeat_kv(v, H // Hkv)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(B_, T_, H * D)
        x = x + o @ P[h + "self_attn.o_proj.weight"].t()
        y = rms_norm(x, P[h + "post_attention_layernorm.weight"])
        if is_moe(i):
            x = x + moe_mlp(P, h, y, B_, T_, loads, aux_terms)
        else:
            x = x + swiglu(y, P[h + "mlp.gate_proj.weight"], P[h + "mlp.up_proj.weight"], P[h + "mlp.down_proj.weight"])
    x = rms_norm(x, P["model.norm.weight"])
    logits = x @ P["lm_head.weight"].t()
    loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    for t in aux_terms:  # each MoE layer's balance loss, averaged over the batch's sequences
        loss = loss + t.mean()
    return loss

def update_bias(loads):
    for h, load in loads.items():
        name = h + "mlp.gate.e_score_correction_bias"
        mean = load.mean()
        bias[name] = bias[name] + a.bias_rate * torch.tensor(np.sign(mean - load), dtype=dt)

# ---- gradients of the first global batch, then STEPS of AdamW with bias updates ---------------------
x0, y0 = batch(0)
loss0 = forward(params, x0, y0, {})
loss0.backward()
with h5py.File(os.path.join(a.out_dir, "ref.h5"), "w") as f:
    f["loss0"] = np.array([loss0.item()])
    for k, v in params.items():
        f["grad/" + k] = v.grad.numpy()
    for v in params.values():
        v.grad = None
    decay = [v for v in params.values() if v.dim() >= 2]
    no_decay = [v for v in params.values() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=tuple(a.betas), eps=a.adam_eps)
    def lr_at(s):  # linear warmup (s+1)/warmup, then cosine to min_lr at the last step
        if s < a.warmup:
            return a.lr * (s + 1) / a.warmup
        prog = min(max((s - a.warmup) / max(1, a.steps - a.warmup), 0.0), 1.0)
        return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * prog))
    losses, norms, max_over_mean = [], [], []
    for s in range(a.steps):
        xs, ys = batch(s)
        loads = {}
        loss = forward(params, xs, ys, loads)
        opt.zero_grad()
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(list(params.values()), a.clip).item())
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        opt.step()
        update_bias(loads)
        losses.append(loss.item())
        max_over_mean.append([float(l.max() / l.mean()) for _, l in sorted(loads.items())])
    f["losses"] = np.array(losses)
    f["grad_norms"] = np.array(norms)
    f["load_max_over_mean"] = np.array(max_over_mean)
    for k, v in params.items():
        f["final/" + k] = v.detach().numpy()
    for k, v in bias.items():
        f["final/" + k] = v.numpy()
print("reference written to", a.out_dir, "loss0", loss0.item(), "losses", [round(l, 5) for l in losses])
