#!/usr/bin/env python3
"""PyTorch oracle for tetra's GPT-2: the same model written independently in torch (float64),
with Hugging Face GPT2LMHeadModel's parameter names and layouts (Conv1D weights [in, out]).

Writes into OUT_DIR:
  weights.h5  consolidated checkpoint (random weights, non-trivial norms and biases)
  tokens.h5   a token dataset (/tokens uint16, attributes vocab_size, tokenizer)
  ref.h5      greedy (a 5-token prompt and its 8-token greedy continuation), loss0 and every parameter's gradient (HF name and layout) for the first global
              batch, and the per-step losses of STEPS AdamW steps with clipping and weight decay
"""
import argparse, math, os
import h5py, numpy as np, torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("out_dir")
p.add_argument("--vocab", type=int, default=96)
p.add_argument("--seq", type=int, default=16)       # model positions = train sequence length
p.add_argument("--dim", type=int, default=32)
p.add_argument("--layers", type=int, default=2)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--batch", type=int, default=4)      # global batch (sequences)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--min_lr", type=float, default=3e-4)
p.add_argument("--wd", type=float, default=0.1)
p.add_argument("--clip", type=float, default=0.5)
p.add_argument("--betas", type=float, nargs=2, default=[0.9, 0.95])
p.add_argument("--eps", type=float, default=1e-8)
p.add_argument("--seed", type=int, default=7)
a = p.parse_args()
os.makedirs(a.out_dir, exist_ok=True)
torch.manual_seed(a.seed)
rng = np.random.default_rng(a.seed)
dt = torch.float64
V, T, C, L, H = a.vocab, a.seq, a.dim, a.layers, a.heads

# ---- weights, HF names and layouts ------------------------------------------------------------
W = {}
def rand(*shape, std=0.02, mean=0.0):
    return torch.tensor(rng.normal(mean, std, size=shape), dtype=dt)
W["transformer.wte.weight"] = rand(V, C, std=0.1)
W["transformer.wpe.weight"] = rand(T, C, std=0.05)
for i in range(L):
    h = f"transformer.h.{i}."
    W[h + "ln_1.weight"] = rand(C, std=0.1, mean=1.0); W[h + "ln_1.bias"] = rand(C, std=0.1)
    W[h + "attn.c_attn.weight"] = rand(C, 3 * C, std=0.15); W[h + "attn.c_attn.bias"] = rand(3 * C, std=0.05)
    W[h + "attn.c_proj.weight"] = rand(C, C, std=0.1); W[h + "attn.c_proj.bias"] = rand(C, std=0.05)
    W[h + "ln_2.weight"] = rand(C, std=0.1, mean=1.0); W[h + "ln_2.bias"] = rand(C, std=0.1)
    W[h + "mlp.c_fc.weight"] = rand(C, 4 * C, std=0.1); W[h + "mlp.c_fc.bias"] = rand(4 * C, std=0.05)
    W[h + "mlp.c_proj.weight"] = rand(4 * C, C, std=0.05); W[h + "mlp.c_proj.bias"] = rand(C, std=0.05)
W["transformer.ln_f.weight"] = rand(C, std=0.1, mean=1.0); W["transformer.ln_f.bias"] = rand(C, std=0.1)

with h5py.File(os.path.join(a.out_dir, "weights.h5"), "w") as f:
    for k, v in W.items():
        f[k] = v.numpy().astype(np.float32)
    f["lm_head.weight"] = W["transformer.wte.weight"].numpy().astype(np.float32)  # tied copy, as HF saves it
    f.attrs["vocab_size"] = V; f.attrs["n_positions"] = T; f.attrs["n_embd"] = C
    f.attrs["n_layer"] = L; f.attrs["n_head"] = H
# The model starts from exactly the fp32 values tetra reads.
params = {k: torch.tensor(v.numpy().astype(np.float32), dtype=dt, requires_grad=True) for k, v in W.items()}

# ---- data -------------------------------------------------------------------------------------
n_windows = a.batch * a.steps
tokens = rng.integers(0, V, size=n_windows * T + 1).astype(np.uint16)
with h5py.File(os.path.join(a.out_dir, "tokens.h5"), "w") as f:
    f.create_dataset("tokens", data=tokens)
    f.attrs["vocab_size"] = V; f.attrs["tokenizer"] = "random"

def batch(step):  # shuffle off: step s uses windows [s·B, (s+1)·B), window w starts at w·T
    xs, ys = [], []
    for w in range(step * a.batch, (step + 1) * a.batch):
        win = tokens[w * T: w * T + T + 1].astype(np.int64)
        xs.append(win[:-1]); ys.append(win[1:])
    return torch.tensor(np.stack(xs)), torch.tensor(np.stack(ys))

# ---- the model --------------------------------------------------------------------------------
def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

def forward(P, idx, tgt=None):  # the loss, or the logits [B, T, V] without targets
    B_, T_ = idx.shape
    x = P["transformer.wte.weight"][idx] + P["transformer.wpe.weight"][:T_]
    mask = torch.tril(torch.ones(T_, T_, dtype=torch.bool))
    D = C // H
    for i in range(L):
        h = f"transformer.h.{i}."
        y = F.layer_norm(x, (C,), P[h + "ln_1.weight"], P[h + "ln_1.bias"], 1e-5)
        qkv = y @ P[h + "attn.c_attn.weight"] + P[h + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)
        q, k, v = [t.view(B_, T_, H, D).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(B_, T_, C)
        x = x + o @ P[h + "attn.c_proj.weight"] + P[h + "attn.c_proj.bias"]
        y = F.layer_norm(x, (C,), P[h + "ln_2.weight"], P[h + "ln_2.bias"], 1e-5)
        y = gelu_tanh(y @ P[h + "mlp.c_fc.weight"] + P[h + "mlp.c_fc.bias"])
        x = x + y @ P[h + "mlp.c_proj.weight"] + P[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5)
    logits = x @ P["transformer.wte.weight"].t()
    return logits if tgt is None else F.cross_entropy(logits.view(-1, V), tgt.reshape(-1))

# ---- greedy continuation of the first window's first 5 tokens, 8 tokens, each the argmax of the
# last position's logits over the whole sequence recomputed (no cache), in float64 ---------------
GREEDY_PROMPT, GREEDY_NEW = 5, 8
with torch.no_grad():
    seq = [int(t) for t in tokens[:GREEDY_PROMPT]]
    for _ in range(GREEDY_NEW):
        seq.append(int(forward(params, torch.tensor([seq]))[0, -1].argmax()))
greedy = np.array(seq, dtype=np.int32)

# ---- gradients of the first global batch --------------------------------------------------------
x0, y0 = batch(0)
loss0 = forward(params, x0, y0)
loss0.backward()
with h5py.File(os.path.join(a.out_dir, "ref.h5"), "w") as f:
    f["loss0"] = np.array([loss0.item()])
    f["greedy"] = greedy  # prompt (GREEDY_PROMPT ids) and continuation
    for k, v in params.items():
        f["grad/" + k] = v.grad.numpy()
    # ---- STEPS of AdamW, PyTorch semantics --------------------------------------------------------
    for v in params.values():
        v.grad = None
    decay = [v for k, v in params.items() if v.dim() >= 2]
    no_decay = [v for k, v in params.items() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=tuple(a.betas), eps=a.eps)
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
print("reference written to", a.out_dir, "loss0", loss0.item(), "losses", [round(l, 5) for l in losses])
