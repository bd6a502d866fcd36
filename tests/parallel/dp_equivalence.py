#!/usr/bin/env python3
"""Data parallelism reproduces the single-rank run: the same global batch split over 1, 2 or 4
ranks and into different micro-batches gives the same per-step losses (1e-5 relative) and the
same final weights. Runs `tetra train` under mpirun on the CPU backend.

usage: dp_equivalence.py TETRA_BIN WORK_DIR [extra --set overrides for every run]
"""
import os, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from script_util import ENV as env, licence_dataset, step_losses

tetra, work = sys.argv[1], sys.argv[2]
extra = sys.argv[3:]
data = licence_dataset(tetra, work)
cfg = os.path.join(work, "cfg.yaml")
with open(cfg, "w") as f:
    f.write(f"""run: {{name: base, output_dir: {work}/runs, seed: 11}}
model: {{arch: gpt2, vocab_size: 256, seq_len: 32, d_model: 32, n_layers: 2, n_heads: 2}}
train: {{steps: 8, global_batch: 8, micro_batch: 8, device: cpu, precision: fp32, grad_clip: 1.0}}
optimizer: {{lr: 3.0e-3, betas: [0.9, 0.95], weight_decay: 0.1, warmup_steps: 2, schedule: cosine, min_lr: 1.0e-4}}
data: {{train: {data}, shuffle: true}}
log: {{every: 100}}
""")

def run(name, np_, dp, micro):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_), tetra, "train", cfg,
           "--set", f"run.name={name}", "--set", f"parallel.dp={dp}", "--set", f"train.micro_batch={micro}"] + \
          [a for o in extra for a in ("--set", o)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(f"FAIL: {name} exited {r.returncode}")
    return step_losses(os.path.join(work, "runs", name))

variants = [("np1_mb8", 1, 1, 8), ("np1_mb2", 1, 1, 2), ("np2_mb4", 2, 2, 4), ("np2_mb1", 2, 2, 1),
            ("np4_mb2", 4, 4, 2), ("np4_mb1", 4, 4, 1)]
base = None
failed = False
for name, np_, dp, micro in variants:
    losses = run(name, np_, dp, micro)
    if base is None:
        base = losses
        print(f"{name}: {['%.6f' % l for l in losses]}")
        continue
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, base))
    ok = len(losses) == len(base) and worst <= 1e-5
    failed |= not ok
    print(f"{name}: max relative loss difference {worst:.2e} {'ok' if ok else 'FAIL'}")
if base[-1] >= base[0]:
    sys.exit("FAIL: loss did not fall")
sys.exit(1 if failed else 0)
