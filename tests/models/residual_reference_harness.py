#!/usr/bin/env python3
"""The residual-precision measurement's harness on the CPU (scripts/bench/residual_precision.sh):
scripts/bench/torch_residual_ref.py's fp32 mode and tetra's CPU backend, from the weights the
reference writes (a Hugging Face folder loaded by model.init_from) and its llm.c token file of real
text, give the same loss at every step (1e-4 relative) — so the weights, the batches (tetra's
shuffled window order, reimplemented there), the learning-rate schedule, clipping and AdamW agree,
and the GPU comparison measures precision alone. Tiny GPT-2 and Llama (grouped-query, untied).
Also: train.residual_dtype fp32 is accepted on the CPU and changes nothing (the same losses, bit
for bit, as bf16: the CPU stream is fp32 either way).

usage: residual_reference_harness.py TETRA_BIN WORK_DIR"""
import json, os, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: shared helpers
from script_util import ENV, step_losses

tetra, work = sys.argv[1], sys.argv[2]
ref = os.path.join(here, "..", "..", "scripts", "bench", "torch_residual_ref.py")
os.makedirs(work, exist_ok=True)
STEPS = 8
common = ["--vocab", "256", "--seq", "32", "--batch", "8", "--steps", str(STEPS), "--lr", "3e-3", "--min-lr", "3e-4",
          "--warmup", "2", "--wd", "0.1", "--betas", "0.9", "0.95", "--clip", "0.5", "--seed", "11",
          "--data-seed", "5", "--shuffle", "1"]
models = {
    "gpt2": (["--arch", "gpt2", "--layers", "2", "--dim", "64", "--heads", "4"],
             "{arch: gpt2, vocab_size: 256, seq_len: 32, d_model: 64, n_layers: 2, n_heads: 4, init_from: INIT}"),
    "llama": (["--arch", "llama", "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "96"],
              "{arch: llama, vocab_size: 256, seq_len: 32, d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, "
              "ffn_dim: 96, init_from: INIT}"),
}


def run(cmd):
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        sys.exit(f"FAIL: {' '.join(cmd[:3])} exited {r.returncode}")
    return r.stdout


text = "licences" if os.path.isdir("/usr/share/common-licenses") else "python"
run([sys.executable, ref, "data", "--out", work, "--text", text])
data = os.path.join(work, "train.bin")
ok = True
for arch, (ref_model, yaml_model) in models.items():
    init = os.path.join(work, f"init_{arch}")
    run([sys.executable, ref, "init", "--out", init] + ref_model + common)
    cfg = os.path.join(work, f"{arch}.yaml")
    with open(cfg, "w") as f:
        f.write(f"""run: {{name: x, output_dir: {work}/runs, seed: 5}}
model: {yaml_model.replace("INIT", init)}
train: {{steps: {STEPS}, global_batch: 8, micro_batch: 4, grad_clip: 0.5, device: cpu, precision: fp32}}
optimizer: {{lr: 3.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1, warmup_steps: 2, schedule: cosine, min_lr: 3.0e-4}}
data: {{train: {data}, shuffle: true}}
checkpoint: {{every: 0, resume: none}}
log: {{every: 100}}
""")
    tetra_losses = {}
    for residual in ("bf16", "fp32"):
        name = f"{arch}_{residual}"
        run([tetra, "train", cfg, "--set", f"run.name={name}", "--set", f"train.residual_dtype={residual}"])
        tetra_losses[residual] = step_losses(os.path.join(work, "runs", name))
    out = run([sys.executable, ref, "train", "--init", init, "--data", data, "--device", "cpu", "--modes", "fp32"]
              + ref_model + common)
    torch_losses = next(json.loads(l) for l in out.splitlines() if l.startswith("{"))["losses"]
    worst = max(abs(a - b) / abs(b) for a, b in zip(tetra_losses["fp32"], torch_losses))
    same = tetra_losses["fp32"] == tetra_losses["bf16"]
    print(f"{arch}: tetra {[round(x, 5) for x in tetra_losses['fp32']]}")
    print(f"{arch}: torch {[round(x, 5) for x in torch_losses]}")
    print(f"{arch}: worst relative difference {worst:.2e} (limit 1e-4); residual_dtype bf16 = fp32 on the CPU: {same}")
    ok = ok and len(torch_losses) == len(tetra_losses["fp32"]) == STEPS and worst <= 1e-4 and same
    ok = ok and tetra_losses["fp32"][-1] < tetra_losses["fp32"][0]  # it trains
sys.exit(0 if ok else 1)
