#!/usr/bin/env python3
"""PyTorch oracle for tetra's Llama: the model written independently in torch (float64) as Hugging
Face's LlamaForCausalLM computes it (RMSNorm, rotate-half RoPE — plain, or its inverse frequencies
rescaled as rope_scaling linear / llama3 says, in fp32 as transformers' modeling_rope_utils computes
them —, grouped-query attention through repeat_kv, SwiGLU, no biases, output layer tied or not), from
Hugging Face's parameter names.
--arch qwen2: Qwen2ForCausalLM (biases on q_proj, k_proj, v_proj; random here, so they count);
--arch qwen3: Qwen3ForCausalLM (RMSNorm of each q and k head over --head-dim channels, weights
q_norm/k_norm [D], before RoPE; D need not be dim / heads);
--arch mistral: MistralForCausalLM (--sliding-window W, 0 = none: with W >= seq the band mask
tokens > t - W keeps every causal position, which the model applies as written).

Writes into OUT_DIR:
  weights.h5  consolidated checkpoint (HF names, `arch` and HF config attributes)
  hf/         the same weights as a Hugging Face folder (config.json + model.safetensors, F32)
  tokens.h5   a token dataset (/tokens uint16, attributes vocab_size, tokenizer)
  ref.h5      greedy (a 5-token prompt and its 8-token greedy continuation), loss0 and every tensor's gradient (grad/NAME) for the first global batch; the losses
              and gradient norms of STEPS AdamW steps with clipping and weight decay; and the
              weights after them (final/NAME)
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
p.add_argument("--rope-theta", type=float, default=10000.0)
p.add_argument("--eps", type=float, default=1e-5)
p.add_argument("--tied", action="store_true")
p.add_argument("--arch", choices=["llama", "qwen2", "qwen3", "mistral"], default="llama")
p.add_argument("--head-dim", type=int, default=0)  # 0: dim / heads
p.add_argument("--sliding-window", type=int, default=0)
p.add_argument("--rope-type", choices=["none", "linear", "llama3"], default="none")
p.add_argument("--rope-factor", type=float, default=8.0)
p.add_argument("--low-freq-factor", type=float, default=1.0)
p.add_argument("--high-freq-factor", type=float, default=4.0)
p.add_argument("--original-context", type=int, default=8192)
p.add_argument("--rope-parameters", action="store_true",
               help="write transformers 5's rope_parameters (with rope_theta inside) instead of rope_scaling")
p.add_argument("--batch", type=int, default=4)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--min_lr", type=float, default=3e-4)
p.add_argument("--wd", type=float, default=0.1)
p.add_argument("--clip", type=float, default=0.5)
p.add_argument("--betas", type=float, nargs=2, default=[0.9, 0.95])
p.add_argument("--adam-eps", type=float, default=1e-8)
p.add_argument("--seed", type=int, default=5)
a = p.parse_args()
os.makedirs(os.path.join(a.out_dir, "hf"), exist_ok=True)
rng = np.random.default_rng(a.seed)
dt = torch.float64
V, T, C, L, H, Hkv, FF = a.vocab, a.seq, a.dim, a.layers, a.heads, a.kv_heads, a.ffn
D = a.head_dim or C // H

# ---- weights, Hugging Face names, [out, in] -----------------------------------------------------
W = {}
def rand(*shape, std=0.02, mean=0.0):
    return rng.normal(mean, std, size=shape)
W["model.embed_tokens.weight"] = rand(V, C, std=0.5)
for i in range(L):
    h = f"model.layers.{i}."
    W[h + "input_layernorm.weight"] = rand(C, std=0.1, mean=1.0)
    W[h + "self_attn.q_proj.weight"] = rand(H * D, C, std=0.2)
    W[h + "self_attn.k_proj.weight"] = rand(Hkv * D, C, std=0.2)
    W[h + "self_attn.v_proj.weight"] = rand(Hkv * D, C, std=0.2)
    if a.arch == "qwen3":
        W[h + "self_attn.q_norm.weight"] = rand(D, std=0.2, mean=1.0)
        W[h + "self_attn.k_norm.weight"] = rand(D, std=0.2, mean=1.0)
    if a.arch == "qwen2":
        W[h + "self_attn.q_proj.bias"] = rand(H * D, std=0.3)
        W[h + "self_attn.k_proj.bias"] = rand(Hkv * D, std=0.3)
        W[h + "self_attn.v_proj.bias"] = rand(Hkv * D, std=0.3)
    W[h + "self_attn.o_proj.weight"] = rand(C, H * D, std=0.1)
    W[h + "post_attention_layernorm.weight"] = rand(C, std=0.1, mean=1.0)
    W[h + "mlp.gate_proj.weight"] = rand(FF, C, std=0.2)
    W[h + "mlp.up_proj.weight"] = rand(FF, C, std=0.2)
    W[h + "mlp.down_proj.weight"] = rand(C, FF, std=0.1)
W["model.norm.weight"] = rand(C, std=0.1, mean=1.0)
if not a.tied:
    W["lm_head.weight"] = rand(V, C, std=0.1)
W = {k: v.astype(np.float32) for k, v in W.items()}  # tetra starts from exactly these fp32 values

CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
           "mistral": "MistralForCausalLM"}
config = {"architectures": [CLASSES[a.arch]], "model_type": a.arch, "vocab_size": V, "hidden_size": C,
          "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": Hkv, "intermediate_size": FF,
          "rope_theta": a.rope_theta, "rms_norm_eps": a.eps, "tie_word_embeddings": a.tied,
          "max_position_embeddings": T, "hidden_act": "silu", "torch_dtype": "float32"}
if a.arch == "qwen2":
    config.update(use_sliding_window=False, sliding_window=4096)  # a window Qwen2 does not apply
if a.arch == "qwen3":
    config.update(head_dim=D, attention_bias=False, use_sliding_window=False)
if a.arch == "mistral":
    config["sliding_window"] = a.sliding_window or None
scaling = None
if a.rope_type == "linear":
    scaling = {"rope_type": "linear", "factor": a.rope_factor}
elif a.rope_type == "llama3":
    scaling = {"rope_type": "llama3", "factor": a.rope_factor, "low_freq_factor": a.low_freq_factor,
               "high_freq_factor": a.high_freq_factor, "original_max_position_embeddings": a.original_context}
if a.rope_parameters:  # transformers 5's spelling: rope_theta inside, "default" for plain RoPE
    del config["rope_theta"]
    config["rope_parameters"] = dict(scaling or {"rope_type": "default"}, rope_theta=a.rope_theta)
else:
    config["rope_scaling"] = scaling
with h5py.File(os.path.join(a.out_dir, "weights.h5"), "w") as f:
    for k, v in W.items():
        f[k] = v
    f.attrs["arch"] = a.arch
    for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "intermediate_size"):
        f.attrs[k] = np.int64(config[k])
    f.attrs["tie_word_embeddings"] = np.int64(a.tied)
    f.attrs["rope_theta"] = a.rope_theta
    f.attrs["rms_norm_eps"] = a.eps
    if a.arch == "mistral":
        f.attrs["sliding_window"] = np.int64(a.sliding_window)
    if a.arch == "qwen3":
        f.attrs["head_dim"] = np.int64(D)
save(os.path.join(a.out_dir, "hf", "model.safetensors"), W, {"format": "pt"})
with open(os.path.join(a.out_dir, "hf", "config.json"), "w") as f:
    json.dump(config, f, indent=2)
params = {k: torch.tensor(v, dtype=dt, requires_grad=True) for k, v in W.items()}

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

# ---- the model, as transformers' modeling_llama computes it ---------------------------------------
def rms_norm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + a.eps))

def rotate_half(x):
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat((-x2, x1), dim=-1)

# LlamaRotaryEmbedding: inv_freq in fp32 from theta, rescaled in fp32 tensor ops as transformers'
# rope init functions do; angles t·inv_freq (here in float64).
inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
if a.rope_type == "linear":
    inv_freq = inv_freq / a.rope_factor
elif a.rope_type == "llama3":
    L0 = a.original_context
    low_wavelen, high_wavelen = L0 / a.low_freq_factor, L0 / a.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / a.rope_factor, inv_freq)
    smooth = (L0 / wavelen - a.low_freq_factor) / (a.high_freq_factor - a.low_freq_factor)
    blended = (1 - smooth) * scaled / a.rope_factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    inv_freq = torch.where(medium, blended, scaled)
    assert bool(medium.any()) and bool((wavelen > low_wavelen).any()), "all three bands should be exercised"
ang = torch.outer(torch.arange(T, dtype=dt), inv_freq.to(dt))
emb = torch.cat((ang, ang), dim=-1)
cos, sin = emb.cos()[None, None], emb.sin()[None, None]

def repeat_kv(x, n):  # [B, Hkv, T, D] -> [B, Hkv·n, T, D]
    return x[:, :, None].expand(x.shape[0], x.shape[1], n, x.shape[2], x.shape[3]).reshape(
        x.shape[0], x.shape[1] * n, x.shape[2], x.shape[3])

def forward(P, idx, tgt=None):  # the loss, or the logits [B, T, V] without targets
    B_, T_ = idx.shape
    x = P["model.embed_tokens.weight"][idx]
    mask = torch.tril(torch.ones(T_, T_, dtype=torch.bool))
    if a.sliding_window:  # Mistral: query t sees keys s with t - W < s <= t
        pos = torch.arange(T_)
        mask &= pos[None, :] > pos[:, None] - a.sliding_window
    for i in range(L):
        h = f"model.layers.{i}."
        y = rms_norm(x, P[h + "input_layernorm.weight"])
        def proj(n):  # nn.Linear, with Qwen2's bias
            out = y @ P[h + f"self_attn.{n}.weight"].t()
            return out + P[h + f"self_attn.{n}.bias"] if h + f"self_attn.{n}.bias" in P else out
        q = proj("q_proj").view(B_, T_, H, D)
        k = proj("k_proj").view(B_, T_, Hkv, D)
        if a.arch == "qwen3":  # Qwen3RMSNorm over each head's D channels, before RoPE
            q = rms_norm(q, P[h + "self_attn.q_norm.weight"])
            k = rms_norm(k, P[h + "self_attn.k_norm.weight"])
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = proj("v_proj").view(B_, T_, Hkv, D).transpose(1, 2)
        q = q * cos[:, :, :T_] + rotate_half(q) * sin[:, :, :T_]
        k = k * cos[:, :, :T_] + rotate_half(k) * sin[:, :, :T_]
        k, v = repeat_kv(k, H // Hkv), repeat_kv(v, H // Hkv)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(B_, T_, H * D)
        x = x + o @ P[h + "self_attn.o_proj.weight"].t()
        y = rms_norm(x, P[h + "post_attention_layernorm.weight"])
        g = y @ P[h + "mlp.gate_proj.weight"].t()
        u = y @ P[h + "mlp.up_proj.weight"].t()
        x = x + (F.silu(g) * u) @ P[h + "mlp.down_proj.weight"].t()
    x = rms_norm(x, P["model.norm.weight"])
    out = P["model.embed_tokens.weight"] if a.tied else P["lm_head.weight"]
    logits = x @ out.t()
    return logits if tgt is None else F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))

# ---- greedy continuation of the first window's first 5 tokens, 8 tokens, each the argmax of the
# last position's logits over the whole sequence recomputed (no cache), in float64 ---------------
GREEDY_PROMPT, GREEDY_NEW = 5, 8
with torch.no_grad():
    seq = [int(t) for t in tokens[:GREEDY_PROMPT]]
    for _ in range(GREEDY_NEW):
        seq.append(int(forward(params, torch.tensor([seq]))[0, -1].argmax()))
greedy = np.array(seq, dtype=np.int32)

# ---- gradients of the first global batch, then STEPS of AdamW --------------------------------------
x0, y0 = batch(0)
loss0 = forward(params, x0, y0)
loss0.backward()
with h5py.File(os.path.join(a.out_dir, "ref.h5"), "w") as f:
    f["loss0"] = np.array([loss0.item()])
    f["greedy"] = greedy  # prompt (GREEDY_PROMPT ids) and continuation
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
    losses, norms = [], []
    for s in range(a.steps):
        xs, ys = batch(s)
        loss = forward(params, xs, ys)
        opt.zero_grad()
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(list(params.values()), a.clip).item())
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        opt.step()
        losses.append(loss.item())
    f["losses"] = np.array(losses)
    f["grad_norms"] = np.array(norms)
    for k, v in params.items():
        f["final/" + k] = v.detach().numpy()
print("reference written to", a.out_dir, "loss0", loss0.item(), "losses", [round(l, 5) for l in losses])
