#!/usr/bin/env python3
"""PyTorch reference for tetra's residual-stream precision (train.residual_dtype, docs/models.md):
the same GPT-2 or Llama, from the same initial weights, on the same batches, trained in

  autocast        torch.autocast bf16: the GEMMs in bf16, the residual stream (embedding output,
                  every block's input and output, the head's input) fp32, as PyTorch users train
  bf16_residual   the same, with the residual stream rounded to bf16 at the embedding and after
                  each add (what tetra's train.residual_dtype: bf16 does)
  fp32            no autocast, TF32 off

Subcommands (the model and training flags are the same in each):
  data  --out DIR                 DIR/train.bin: real text as bytes (vocabulary 256), llm.c's .bin
                                  format, which tetra reads as it is (docs/data.md). --text licences
                                  (default): /usr/share/common-licenses, every file but LGPL-3, in
                                  name order, as scripts/prepare_tiny_data.sh takes them; --text
                                  python: the .py files of this Python's standard library.
  init  --out DIR                 the initial weights as a Hugging Face folder (config.json and
                                  model.safetensors, fp32) for tetra's model.init_from, drawn as
                                  tetra initialises (normal 0.02; projections into the stream
                                  0.02/√(2·layers); GPT-2 positions 0.01; norms 1, biases 0)
  train --init DIR --data FILE    trains each --modes mode; prints one JSON line per mode: the loss
                                  of every step, the cumulative wall time after every step (CUDA
                                  events), the median step time

Batches are tetra's (data/sampler.h): windows of seq + 1 tokens at stride seq, global slot i of
epoch i / W maps to window perm_epoch(i mod W) with a Fisher-Yates permutation drawn from
splitmix64(seed XOR epoch) (--shuffle), else window i mod W. The optimizer is tetra's: AdamW with
decay on tensors of 2+ dimensions, linear warmup (s+1)/warmup, cosine to --min-lr at the last step,
global-norm clipping. Needs PyTorch (2.x with CUDA for the measurement; --device cpu runs every
mode on the CPU, slowly, with CPU autocast: tests/models/residual_reference_harness.py checks the
fp32 mode there against tetra step by step)."""
import argparse, glob, json, math, os, struct, sys, sysconfig, time

import numpy as np

LLMC_MAGIC, LLMC_VERSION = 20240520, 1
MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------
# Data: real text as bytes, in llm.c's .bin format; tetra's window order
# ---------------------------------------------------------------------------------------------

def text_files(kind):
    if kind == "licences":
        src = "/usr/share/common-licenses"
        if not os.path.isdir(src):
            sys.exit(f"{src} not found: pass --text python (this Python's standard library) instead")
        names = sorted(n for n in os.listdir(src) if n != "LGPL-3")
        return [os.path.join(src, n) for n in names if os.path.isfile(os.path.join(src, n))
                and not os.path.islink(os.path.join(src, n))]
    if kind == "python":
        lib = sysconfig.get_paths()["stdlib"]
        return sorted(glob.glob(os.path.join(lib, "*.py")))
    sys.exit(f"--text {kind}: use licences or python")


def write_llmc_bin(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = LLMC_MAGIC, LLMC_VERSION, len(tokens)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())
    os.replace(tmp, path)


def read_llmc_bin(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        if header[0] != LLMC_MAGIC or header[1] != LLMC_VERSION:
            sys.exit(f"{path}: not an llm.c token file (magic {header[0]}, version {header[1]})")
        tokens = np.frombuffer(f.read(), dtype=np.uint16)
    if len(tokens) != header[2]:
        sys.exit(f"{path}: header says {header[2]} tokens, file holds {len(tokens)}")
    return tokens


class SplitMix64:
    """runtime/random.h's Rng: splitmix64, below(n) = next % n."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        return self.next_u64() % n if n else 0


def epoch_permutation(n, seed, epoch):
    perm = list(range(n))
    rng = SplitMix64(seed ^ epoch)
    for i in range(n - 1, 0, -1):  # Fisher-Yates from the back
        j = rng.below(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Batches:
    """The global batch of each step as tetra's sampler draws it (one dataset, any dp split)."""

    def __init__(self, tokens, seq, batch, shuffle, seed):
        self.tokens, self.seq, self.batch, self.shuffle, self.seed = tokens, seq, batch, shuffle, seed
        self.windows = (len(tokens) - 1) // seq
        if self.windows < 1:
            sys.exit(f"the data holds {len(tokens)} tokens, less than one window of {seq} + 1")
        self.perms = {}

    def window(self, slot):
        epoch, index = divmod(slot, self.windows)
        if not self.shuffle:
            return index
        if epoch not in self.perms:
            self.perms = {epoch: epoch_permutation(self.windows, self.seed, epoch)}
        return self.perms[epoch][index]

    def __call__(self, step):
        rows = []
        for slot in range(step * self.batch, (step + 1) * self.batch):
            w = self.window(slot)
            rows.append(self.tokens[w * self.seq: w * self.seq + self.seq + 1].astype(np.int64))
        rows = np.stack(rows)
        return rows[:, :-1], rows[:, 1:]


# ---------------------------------------------------------------------------------------------
# Weights: Hugging Face names; safetensors written and read here (JSON header + raw tensors)
# ---------------------------------------------------------------------------------------------

def gpt2_conv1d(name):  # GPT-2's Conv1D weights are stored [in, out]
    return name.endswith(("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"))


def init_weights(a):
    """{HF name: fp32 numpy array in nn.Linear's [out, in] layout}, drawn as tetra draws them."""
    rng = np.random.default_rng(a.seed)
    C, L, V = a.dim, a.layers, a.vocab
    resid = 0.02 / math.sqrt(2 * L)
    normal = lambda *shape, std=0.02: rng.normal(0.0, std, size=shape).astype(np.float32)
    W = {}
    if a.arch == "gpt2":
        W["transformer.wte.weight"] = normal(V, C)
        W["transformer.wpe.weight"] = normal(a.seq, C, std=0.01)
        for i in range(L):
            h = f"transformer.h.{i}."
            W[h + "ln_1.weight"], W[h + "ln_1.bias"] = np.ones(C, np.float32), np.zeros(C, np.float32)
            W[h + "attn.c_attn.weight"], W[h + "attn.c_attn.bias"] = normal(3 * C, C), np.zeros(3 * C, np.float32)
            W[h + "attn.c_proj.weight"], W[h + "attn.c_proj.bias"] = normal(C, C, std=resid), np.zeros(C, np.float32)
            W[h + "ln_2.weight"], W[h + "ln_2.bias"] = np.ones(C, np.float32), np.zeros(C, np.float32)
            W[h + "mlp.c_fc.weight"], W[h + "mlp.c_fc.bias"] = normal(4 * C, C), np.zeros(4 * C, np.float32)
            W[h + "mlp.c_proj.weight"], W[h + "mlp.c_proj.bias"] = normal(C, 4 * C, std=resid), np.zeros(C, np.float32)
        W["transformer.ln_f.weight"], W["transformer.ln_f.bias"] = np.ones(C, np.float32), np.zeros(C, np.float32)
    else:
        H, Hkv, F_ = a.heads, a.kv_heads or a.heads, a.ffn
        D = C // H
        W["model.embed_tokens.weight"] = normal(V, C)
        for i in range(L):
            p = f"model.layers.{i}."
            W[p + "input_layernorm.weight"] = np.ones(C, np.float32)
            W[p + "self_attn.q_proj.weight"] = normal(H * D, C)
            W[p + "self_attn.k_proj.weight"] = normal(Hkv * D, C)
            W[p + "self_attn.v_proj.weight"] = normal(Hkv * D, C)
            W[p + "self_attn.o_proj.weight"] = normal(C, H * D, std=resid)
            W[p + "post_attention_layernorm.weight"] = np.ones(C, np.float32)
            W[p + "mlp.gate_proj.weight"] = normal(F_, C)
            W[p + "mlp.up_proj.weight"] = normal(F_, C)
            W[p + "mlp.down_proj.weight"] = normal(C, F_, std=resid)
        W["model.norm.weight"] = np.ones(C, np.float32)
        W["lm_head.weight"] = normal(V, C)
    return W


def hf_config(a):
    if a.arch == "gpt2":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": a.vocab,
                "n_positions": a.seq, "n_ctx": a.seq, "n_embd": a.dim, "n_layer": a.layers, "n_head": a.heads,
                "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "tie_word_embeddings": True,
                "torch_dtype": "float32"}
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": a.vocab,
            "hidden_size": a.dim, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
            "num_key_value_heads": a.kv_heads or a.heads, "head_dim": a.dim // a.heads,
            "intermediate_size": a.ffn, "tie_word_embeddings": False, "rope_theta": a.rope_theta,
            "rms_norm_eps": 1e-5, "max_position_embeddings": a.seq, "hidden_act": "silu", "rope_scaling": None,
            "torch_dtype": "float32"}


def write_hf_folder(out, a, W):
    os.makedirs(out, exist_ok=True)
    header, blobs, offset = {}, [], 0
    for name, v in W.items():
        v = np.ascontiguousarray(v.T if a.arch == "gpt2" and gpt2_conv1d(name) else v, dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [offset, offset + v.nbytes]}
        blobs.append(v.tobytes())
        offset += v.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(out, "model.safetensors.tmp"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(os.path.join(out, "model.safetensors.tmp"), os.path.join(out, "model.safetensors"))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(a), f, indent=1)


def read_hf_folder(folder, a):
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    W = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"{folder}: {name} is {t['dtype']}; the reference reads the fp32 folders `init` writes")
        b, e = t["data_offsets"]
        v = np.frombuffer(data[b:e], dtype=np.float32).reshape(t["shape"])
        W[name] = np.ascontiguousarray(v.T) if a.arch == "gpt2" and gpt2_conv1d(name) else v.copy()
    want = init_weights(a)
    for name, v in want.items():
        if name not in W or W[name].shape != v.shape:
            sys.exit(f"{folder}: {name} missing or of another shape than --arch {a.arch} with these sizes gives")
    return W


# ---------------------------------------------------------------------------------------------
# The models (the same arithmetic as models/gpt_block.h and models/llama_block.h)
# ---------------------------------------------------------------------------------------------

def forward(torch, F, P, idx, tgt, a, mode):
    B, T = idx.shape
    C, H = a.dim, a.heads
    D = C // H
    low = torch.bfloat16

    def stream(x):  # the residual stream: fp32, or rounded to bf16 (bf16_residual)
        return x.to(low) if mode == "bf16_residual" else x

    def attention(q, k, v):  # [B, heads, T, D], causal
        if k.shape[1] != q.shape[1]:  # grouped-query: each K/V head serves H / Hkv query heads
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v

    def heads(t, n):
        return t.view(B, T, n, D).transpose(1, 2)

    def merge(t):
        return t.transpose(1, 2).reshape(B, T, -1)

    if a.arch == "gpt2":
        # The LayerNorms read the stream in fp32 (as CUDA autocast casts their input; explicit for the
        # CPU's autocast, which does not) and return fp32; the next GEMM casts.
        x = stream(F.embedding(idx, P["transformer.wte.weight"]) + P["transformer.wpe.weight"][:T])
        for i in range(a.layers):
            h = f"transformer.h.{i}."
            n = F.layer_norm(x.float(), (C,), P[h + "ln_1.weight"], P[h + "ln_1.bias"], 1e-5)
            q, k, v = F.linear(n, P[h + "attn.c_attn.weight"], P[h + "attn.c_attn.bias"]).split(C, dim=-1)
            o = merge(attention(heads(q, H), heads(k, H), heads(v, H)))
            x = stream(x + F.linear(o, P[h + "attn.c_proj.weight"], P[h + "attn.c_proj.bias"]))
            n = F.layer_norm(x.float(), (C,), P[h + "ln_2.weight"], P[h + "ln_2.bias"], 1e-5)
            m = F.gelu(F.linear(n, P[h + "mlp.c_fc.weight"], P[h + "mlp.c_fc.bias"]), approximate="tanh")
            x = stream(x + F.linear(m, P[h + "mlp.c_proj.weight"], P[h + "mlp.c_proj.bias"]))
        n = F.layer_norm(x.float(), (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5)
        logits = F.linear(n, P["transformer.wte.weight"])
    else:
        Hkv = a.kv_heads or H
        pos = torch.arange(T, device=idx.device, dtype=torch.float32)
        inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, D, 2, device=idx.device, dtype=torch.float32) / D))
        ang = torch.outer(pos, inv_freq)
        cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)

        def rope(t):  # rotate-half in fp32, back in t's dtype (tetra rotates bf16 q/k in place)
            f = t.float()
            rot = torch.cat([-f[..., D // 2:], f[..., :D // 2]], -1)
            return (f * cos + rot * sin).to(t.dtype)

        def rmsnorm(t, w):  # statistics and output fp32; the next GEMM casts
            f = t.float()
            return f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-5) * w

        x = stream(F.embedding(idx, P["model.embed_tokens.weight"]))
        for i in range(a.layers):
            p = f"model.layers.{i}."
            n = rmsnorm(x, P[p + "input_layernorm.weight"])
            q = rope(heads(F.linear(n, P[p + "self_attn.q_proj.weight"]), H))
            k = rope(heads(F.linear(n, P[p + "self_attn.k_proj.weight"]), Hkv))
            v = heads(F.linear(n, P[p + "self_attn.v_proj.weight"]), Hkv)
            o = merge(attention(q, k, v))
            x = stream(x + F.linear(o, P[p + "self_attn.o_proj.weight"]))
            n = rmsnorm(x, P[p + "post_attention_layernorm.weight"])
            g = F.linear(n, P[p + "mlp.gate_proj.weight"])
            u = F.linear(n, P[p + "mlp.up_proj.weight"])
            x = stream(x + F.linear(F.silu(g) * u, P[p + "mlp.down_proj.weight"]))
        n = rmsnorm(x, P["model.norm.weight"])
        logits = F.linear(n, P["lm_head.weight"])
    return F.cross_entropy(logits.float().reshape(-1, a.vocab), tgt.reshape(-1))


def train(a, mode):
    import torch
    import torch.nn.functional as F

    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    W = read_hf_folder(a.init, a)
    P = {k: torch.tensor(v, device=dev, requires_grad=True) for k, v in W.items()}
    decay = [t for t in P.values() if t.dim() >= 2]
    no_decay = [t for t in P.values() if t.dim() < 2]
    kw = {"foreach": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=tuple(a.betas), eps=1e-8, **kw)

    def lr_at(s):
        if a.warmup > 0 and s < a.warmup:
            return a.lr * (s + 1) / a.warmup
        prog = min(max((s - a.warmup) / max(1, a.steps - a.warmup), 0.0), 1.0)
        return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * prog))

    batches = Batches(read_llmc_bin(a.data), a.seq, a.batch, a.shuffle, a.data_seed)
    losses, marks = [], []
    timed = dev.type == "cuda"
    start = torch.cuda.Event(enable_timing=True) if timed else None
    if timed:
        start.record()
    t0 = time.perf_counter()
    for s in range(a.steps):
        xs, ys = batches(s)
        x = torch.from_numpy(xs).to(dev, non_blocking=True)
        y = torch.from_numpy(ys).to(dev, non_blocking=True)
        if mode == "fp32":
            loss = forward(torch, F, P, x, y, a, mode)
        else:
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = forward(torch, F, P, x, y, a, mode)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(list(P.values()), a.clip)
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        opt.step()
        losses.append(loss.detach())
        if timed:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            marks.append(e)
        else:
            marks.append(time.perf_counter() - t0)
    if timed:
        torch.cuda.synchronize()
        cumulative = [start.elapsed_time(e) for e in marks]
    else:
        cumulative = [1e3 * t for t in marks]
    step_ms = [cumulative[0]] + [b - a_ for a_, b in zip(cumulative, cumulative[1:])]
    vals = [float(l) for l in torch.stack(losses).float().cpu()]
    return {"impl": "torch", "mode": mode, "arch": a.arch, "steps": a.steps, "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if timed else "cpu", "torch": torch.__version__,
            "losses": vals, "cumulative_ms": cumulative, "ms_per_step_median": float(np.median(step_ms)),
            "final_loss": float(np.mean(vals[-min(20, len(vals)):]))}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["data", "init", "train"])
    p.add_argument("--out", help="data: the directory of train.bin; init: the Hugging Face folder")
    p.add_argument("--text", default="licences", help="data: licences or python")
    p.add_argument("--init", help="train: the folder `init` wrote")
    p.add_argument("--data", help="train: the token file `data` wrote")
    p.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"])
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=0, help="llama: 0 = heads")
    p.add_argument("--ffn", type=int, default=1024, help="llama: SwiGLU width")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=32, help="sequences per step")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--betas", type=float, nargs=2, default=[0.9, 0.95])
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1234, help="init: the weights' seed")
    p.add_argument("--data-seed", type=int, default=1234, help="train: tetra's run.seed (the shuffle)")
    p.add_argument("--shuffle", type=int, default=1)
    p.add_argument("--modes", default="autocast,bf16_residual,fp32")
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    a.shuffle = bool(a.shuffle)

    if a.command == "data":
        if not a.out:
            sys.exit("data: --out DIR is required")
        os.makedirs(a.out, exist_ok=True)
        files = text_files(a.text)
        tokens = np.frombuffer(b"".join(open(f, "rb").read() for f in files), dtype=np.uint8).astype(np.uint16)
        write_llmc_bin(os.path.join(a.out, "train.bin"), tokens)
        print(json.dumps({"data": os.path.join(a.out, "train.bin"), "text": a.text, "files": len(files),
                          "tokens": int(len(tokens))}))
    elif a.command == "init":
        if not a.out:
            sys.exit("init: --out DIR is required")
        write_hf_folder(a.out, a, init_weights(a))
        print(json.dumps({"init": a.out, "arch": a.arch}))
    else:
        if not a.init or not a.data:
            sys.exit("train: --init DIR and --data FILE are required")
        for mode in a.modes.split(","):
            if mode not in ("autocast", "bf16_residual", "fp32"):
                sys.exit(f"--modes: {mode} is not autocast, bf16_residual or fp32")
            print(json.dumps(train(a, mode)), flush=True)


if __name__ == "__main__":
    main()
