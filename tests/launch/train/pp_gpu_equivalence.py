#!/usr/bin/env python3
"""Pipeline parallelism on GPUs: bf16 training on 2 GPUs at pp 2 (every schedule, NCCL transfers
on one channel communicator per direction and payload) reproduces the 1-GPU run within bf16
tolerance (per-step losses within 2e-2 relative over 20 steps, the same trend); the goodput
ledger's pipeline-bubble row is measured (> 0). Exits 77 (skipped) with fewer than 2 GPUs.

usage: pp_gpu_equivalence.py TETRA_BIN WORK_DIR"""
import json, os, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from script_util import ENV, licence_run_config, require_gpus, step_losses

tetra, work = sys.argv[1], sys.argv[2]
require_gpus(2)
cfg = licence_run_config(tetra, work, """
model: {arch: gpt2, vocab_size: 256, seq_len: 128, d_model: 128, n_layers: 8, n_heads: 4}
parallel: {dp: 1}
train: {steps: 20, global_batch: 16, micro_batch: 2, device: cuda, precision: bf16, grad_clip: 0.5}
optimizer: {lr: 2.0e-3, betas: [0.9, 0.95], weight_decay: 0.1, warmup_steps: 5, schedule: cosine, min_lr: 2.0e-4}
""", seed=3)


def run(name, pp, schedule):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(pp), tetra, "train", cfg,
           "--set", f"run.name={name}", "--set", f"parallel.pp={pp}", "--set", f"parallel.schedule={schedule}"]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        sys.exit(f"FAIL: {name} exited {r.returncode}")
    return step_losses(os.path.join(work, "runs", name))


base = run("one_gpu", 1, "1f1b")
print(f"1 GPU: first {base[0]:.4f} last {base[-1]:.4f}")
ok = base[-1] < base[0] - 0.5
for schedule in ["gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "dualpipe", "dualpipev"]:
    name = f"pp2_{schedule}"
    losses = run(name, 2, schedule)
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, base))
    with open(os.path.join(work, "runs", name, "goodput.jsonl")) as f:
        bubble = sum(e.get("bubble", 0) for e in map(json.loads, f) if e.get("event") == "step")
    good = len(losses) == len(base) and worst <= 2e-2 and bubble > 0
    ok &= good
    print(f"pp 2 {schedule}: max relative loss difference {worst:.2e} (limit 2e-2), measured bubble "
          f"{bubble * 1e3:.1f} ms over the steps {'ok' if good else 'FAIL'}")
sys.exit(0 if ok else 1)
