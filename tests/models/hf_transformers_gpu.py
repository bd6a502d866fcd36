#!/usr/bin/env python3
"""tetra against transformers itself, on one GPU in fp32 (label gpu; exits 77 without a GPU or
without transformers): a random LlamaForCausalLM with Llama 3.1's rope_scaling (llama3) made by
save_pretrained (no download), then
  - `tetra train` of a config whose model section is `{init_from: FOLDER, seq_len: T}` alone: its
    first-step loss equals transformers' loss on the same batch;
  - `tetra ckpt consolidate --format hf` of the step-1 checkpoint: the folder's config.json carries
    the rope scaling, from_pretrained reads it, and transformers' loss of the exported model equals
    tetra's first-step loss from that folder (a second run, init_from the export);
  - the same for linear scaling, and for transformers 5's own spelling (whatever save_pretrained
    writes: rope_parameters or rope_scaling).
Both sides in fp32 with TF32 off, eager attention; tolerance 1e-5 relative (fp32 sums in different
orders over 4·64 tokens; the plain-RoPE round trip agrees to 1e-7, a missed scaling moves the loss
by ~1e-2 here).

usage: hf_transformers_gpu.py TETRA_BIN WORK_DIR"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: shared helpers
from script_util import require_gpus, require_modules  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
require_gpus(1)
require_modules("torch", "transformers", "h5py", "numpy")
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

V5 = int(transformers.__version__.split(".")[0]) >= 5  # rope_parameters (rope_theta inside) and dtype=

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
V, T, B = 256, 64, 4
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    if not cond:
        failures.append(msg)


rng = np.random.default_rng(3)
tokens = rng.integers(0, V, size=B * T + 1).astype(np.uint16)
data = os.path.join(work, "tokens.h5")
with h5py.File(data, "w") as f:
    f.create_dataset("tokens", data=tokens)
    f.attrs["vocab_size"] = V
    f.attrs["tokenizer"] = "random"
# tetra's first batch with shuffle off: windows w = 0..B-1 of T + 1 tokens at w·T.
ids = torch.tensor(np.stack([tokens[w * T: w * T + T].astype(np.int64) for w in range(B)]))
tgt = torch.tensor(np.stack([tokens[w * T + 1: w * T + T + 1].astype(np.int64) for w in range(B)]))


def hf_loss(folder):
    dtype = {"dtype" if V5 else "torch_dtype": torch.float32}
    model = LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager", **dtype).cuda()
    with torch.no_grad():
        logits = model(ids.cuda()).logits.float()
    return F.cross_entropy(logits.reshape(-1, V), tgt.cuda().reshape(-1)).item(), model.config


def tetra_first_loss(name, folder):
    cfg = os.path.join(work, name + ".yaml")
    with open(cfg, "w") as f:
        f.write(f"""run: {{name: {name}, output_dir: {work}/runs, seed: 1}}
model: {{init_from: {folder}, seq_len: {T}}}
train: {{steps: 1, global_batch: {B}, micro_batch: {B}, device: cuda, precision: fp32}}
optimizer: {{lr: 1.0e-2, warmup_steps: 0, schedule: constant}}
data: {{train: {data}, shuffle: false}}
checkpoint: {{every: 1}}
""")
    r = subprocess.run([tetra, "train", cfg], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        check(False, f"{name}: tetra train exits 0")
        return None
    with open(os.path.join(work, "runs", name, "metrics.jsonl")) as f:
        return json.loads(f.readline())["loss"]


def round_trip(label, rope_scaling):
    torch.manual_seed(0)
    rope = (dict(rope_parameters=dict(rope_scaling, rope_theta=500000.0)) if V5
            else dict(rope_theta=500000.0, rope_scaling=rope_scaling))
    config = LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4 * T,
                         rms_norm_eps=1e-5, tie_word_embeddings=False, **rope)
    src = os.path.join(work, label + "_src")
    LlamaForCausalLM(config).save_pretrained(src, safe_serialization=True)
    with open(os.path.join(src, "config.json")) as f:
        written = json.load(f)
    print(f"{label}: save_pretrained wrote rope_scaling={written.get('rope_scaling')} "
          f"rope_parameters={written.get('rope_parameters')}")
    want, _ = hf_loss(src)
    got = tetra_first_loss(label, src)
    if got is not None:
        check(abs(got - want) <= 1e-5 * abs(want),
              f"{label}: tetra's first-step loss {got:.8f} from init_from + seq_len equals transformers' {want:.8f}")
    out = os.path.join(work, label + "_export")
    r = subprocess.run([tetra, "ckpt", "consolidate", os.path.join(work, "runs", label, "checkpoints", "step_1"),
                        "--format", "hf", "--out", out], capture_output=True, text=True)
    check(r.returncode == 0, f"{label}: tetra ckpt consolidate --format hf exits 0 {r.stderr[-500:]}")
    if r.returncode != 0:
        return
    with open(os.path.join(out, "config.json")) as f:
        exported = json.load(f)
    check((exported.get("rope_scaling") or {}).get("rope_type") == rope_scaling["rope_type"],
          f"{label}: the export writes rope_scaling back ({exported.get('rope_scaling')})")
    want2, read = hf_loss(out)
    params = getattr(read, "rope_parameters", None) or getattr(read, "rope_scaling", None) or {}
    check(params.get("rope_type") == rope_scaling["rope_type"],
          f"{label}: from_pretrained reads the export's rope type ({params})")
    got2 = tetra_first_loss(label + "_again", out)
    if got2 is not None:
        check(abs(got2 - want2) <= 1e-5 * abs(want2),
              f"{label}: from_pretrained's loss of the export {want2:.8f} equals tetra's from it {got2:.8f}")


round_trip("llama3", {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 1024})
round_trip("linear", {"rope_type": "linear", "factor": 4.0})
if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
