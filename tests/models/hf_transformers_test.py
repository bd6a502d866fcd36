#!/usr/bin/env python3
"""A Hugging Face model of family ARCH against transformers itself, both ways: a random
{Llama,Qwen2,Qwen3,Mistral}ForCausalLM (every tensor drawn here, Qwen2's q/k/v biases included) made with
save_pretrained (fp32, no download) is trained one step by `tetra train` from `model.init_from`
(CPU, fp32, at a learning rate too small to move an fp32 weight): its first-step loss equals
transformers' loss of the same batch (computed in float64) to 1e-5 relative, the fp32 CPU
backend's tolerance against a float64 oracle (tests/models/llama_torch_test.cpp). Then
`tetra ckpt consolidate --format hf` of that step: from_pretrained reads the folder, every tensor
equals the original bit for bit, and its loss equals the original's to 1e-12 (the same float64
computation of the same weights). With a GPU, the same first step under CUDA in bf16 is within
2e-2 of transformers' fp32 loss: bf16 keeps 8 significant bits (unit roundoff 2^-8 ≈ 3.9e-3), and
a 2-layer model rounds the stream ~10 times, so differences of a few 1e-3 are expected; the bound
leaves a factor ~5.

Needs transformers (the GPU machine's Python); exits 77 (skipped) without it.
usage: hf_transformers_test.py TETRA_BIN WORK_DIR ARCH   (ARCH: llama, qwen2, qwen3, mistral)"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

try:
    import h5py
    import torch
    import torch.nn.functional as F
    import transformers
except ImportError as e:
    print(f"SKIP: {e.name} is not installed (this test needs transformers and torch)")
    sys.exit(77)

tetra, work, arch = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
V, C, L, H, HKV, FF, T, B = 128, 64, 2, 4, 2, 96, 32, 4
HEAD_DIM = 24  # Qwen3's own head_dim, not C / H = 16
SLIDING_WINDOW = 4096  # Mistral's: at least the context, so full attention (tetra refuses a shorter one)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def make_config():
    common = dict(vocab_size=V, hidden_size=C, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=HKV,
                  intermediate_size=FF, max_position_embeddings=T, rope_theta=10000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=False)
    if arch == "llama":
        return transformers.LlamaConfig(**common)
    if arch == "qwen2":
        return transformers.Qwen2Config(use_sliding_window=False, **common)
    if arch == "qwen3":
        return transformers.Qwen3Config(head_dim=HEAD_DIM, attention_bias=False, use_sliding_window=False, **common)
    if arch == "mistral":
        return transformers.MistralConfig(sliding_window=SLIDING_WINDOW, **common)
    fail(f"unknown ARCH {arch}")


torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(make_config(), torch_dtype=torch.float32)
with torch.no_grad():  # every tensor random, biases and norms included, so each of them counts
    for name, p in model.named_parameters():  # (q_norm and k_norm end so too)
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.1 * torch.randn_like(p))
        elif name.endswith("embed_tokens.weight"):
            p.copy_(0.5 * torch.randn_like(p))
        else:
            p.copy_((0.3 if name.endswith(".bias") else 0.1) * torch.randn_like(p))
src = os.path.join(work, "hf_src")
model.save_pretrained(src, safe_serialization=True)

rng = np.random.default_rng(3)
tokens = rng.integers(0, V, size=B * T + 1).astype(np.uint16)
with h5py.File(os.path.join(work, "tokens.h5"), "w") as f:
    f.create_dataset("tokens", data=tokens)
    f.attrs["vocab_size"] = V
    f.attrs["tokenizer"] = "random"
x = torch.tensor(np.stack([tokens[w * T: w * T + T] for w in range(B)]).astype(np.int64))
y = torch.tensor(np.stack([tokens[w * T + 1: w * T + T + 1] for w in range(B)]).astype(np.int64))


def loss_of(m, dtype=torch.float64):
    m = m.to(dtype).eval()
    with torch.no_grad():
        logits = m(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, V).to(torch.float64), y.reshape(-1)).item()


ref = loss_of(model)
ref32 = loss_of(model, torch.float32)


def run(*args):
    p = subprocess.run([tetra, *args], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"tetra {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def train(name, device, precision):
    model_keys = (f"arch: {arch}, vocab_size: {V}, seq_len: {T}, d_model: {C}, n_layers: {L}, n_heads: {H}, "
                  f"n_kv_heads: {HKV}, ffn_dim: {FF}, norm_eps: 1.0e-6, rope_theta: 10000, tie_embeddings: false")
    if arch == "mistral":
        model_keys += f", sliding_window: {SLIDING_WINDOW}"
    if arch == "qwen3":
        model_keys += f", head_dim: {HEAD_DIM}"
    cfg = os.path.join(work, name + ".yaml")
    with open(cfg, "w") as f:
        f.write(f"""run: {{name: {name}, output_dir: {work}/runs, seed: 1}}
model: {{{model_keys}, init_from: {src}}}
train: {{steps: 1, global_batch: {B}, micro_batch: {B}, device: {device}, precision: {precision}}}
optimizer: {{lr: 1.0e-30, min_lr: 0, warmup_steps: 0, weight_decay: 0}}
data: {{train: {work}/tokens.h5, shuffle: false}}
checkpoint: {{every: 1}}
log: {{every: 1}}
""")
    run("train", cfg)
    with open(os.path.join(work, "runs", name, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return [line for line in lines if line.get("step") == 1][0]["loss"]


got = train("cpu", "cpu", "fp32")
print(f"{arch}: first-step loss tetra {got:.9f}, transformers {ref:.9f}")
if abs(got - ref) > 1e-5 * abs(ref):
    fail(f"first-step loss {got} != transformers' {ref}")

out = os.path.join(work, "hf_out")
run("ckpt", "consolidate", os.path.join(work, "runs", "cpu", "checkpoints", "step_1"), "--format", "hf", "--out", out)
back = transformers.AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32)
if type(back) is not type(model):
    fail(f"from_pretrained made a {type(back).__name__}, not a {type(model).__name__}")
want = model.to(torch.float32).state_dict()
have = back.state_dict()
if sorted(want) != sorted(have):
    fail(f"exported tensors differ: missing {sorted(set(want) - set(have))}, extra {sorted(set(have) - set(want))}")
for name, w in want.items():
    if not torch.equal(w, have[name]):
        fail(f"exported {name} differs from the original")
back_loss = loss_of(back)
print(f"{arch}: exported folder's loss {back_loss:.12f}")
if abs(back_loss - ref) > 1e-12 * abs(ref):
    fail(f"from_pretrained loss {back_loss} != {ref}")

if torch.cuda.is_available():
    got16 = train("cuda", "cuda", "bf16")
    print(f"{arch}: first-step loss tetra CUDA bf16 {got16:.6f}, transformers fp32 {ref32:.6f}")
    if abs(got16 - ref32) > 2e-2 * abs(ref32):
        fail(f"CUDA bf16 first-step loss {got16} is not within 2e-2 of {ref32}")
print("PASS")
