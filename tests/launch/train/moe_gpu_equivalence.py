#!/usr/bin/env python3
"""A Llama with mixture-of-experts layers (8 experts, top 2 of 2-of-4 groups, a shared expert, the
balance loss, bias updates) on a GPU against the CPU backend, over 30 steps:
  - GPU fp32 follows the CPU's per-step losses to 1e-4 relative (the same routing up to ties);
  - GPU bf16 stays within 2e-2 relative per step and learns;
  - GPU bf16 with parallel.moe_overlap (two micro-batches interleaved at the MoE layers' phases)
    gives the same losses, gradient norms and expert loads bit for bit as without.
Exits 77 (skipped) where no GPU is visible.

usage: moe_gpu_equivalence.py TETRA_BIN WORK_DIR"""
import os, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from script_util import ENV, licence_run_config, metrics_rows, require_gpus

tetra, work = sys.argv[1], sys.argv[2]
require_gpus(1)
cfg = licence_run_config(tetra, work, """
model: {arch: llama, vocab_size: 256, seq_len: 64, d_model: 64, n_layers: 3, n_heads: 4, n_kv_heads: 2, ffn_dim: 128,
  moe: {n_experts: 8, top_k: 2, n_shared: 1, ffn_dim: 32, first_k_dense: 1, n_group: 4, topk_group: 2,
         aux_loss_coef: 0.01, bias_update_rate: 1.0e-3}}
train: {steps: 30, global_batch: 8, micro_batch: 2, grad_clip: 1.0}
optimizer: {lr: 1.0e-3, betas: [0.9, 0.95], weight_decay: 0.1, warmup_steps: 5, schedule: cosine, min_lr: 2.0e-4}
""")


def run(name, device, precision, *sets):
    args = [tetra, "train", cfg, "--set", f"run.name={name}", "--set", f"train.device={device}",
            "--set", f"train.precision={precision}"] + [a for s in sets for a in ("--set", s)]
    r = subprocess.run(args, env=ENV, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        sys.exit(f"FAIL: {name} exited {r.returncode}")
    return metrics_rows(os.path.join(work, "runs", name))


def losses(rows):
    return [r["loss"] for r in rows]


cpu = run("cpu_fp32", "cpu", "fp32")
g32 = run("gpu_fp32", "cuda", "fp32")
g16 = run("gpu_bf16", "cuda", "bf16")
g16o = run("gpu_bf16_overlap", "cuda", "bf16", "parallel.moe_overlap=true")
e32 = max(abs(a - b) / abs(b) for a, b in zip(losses(g32), losses(cpu)))
e16 = max(abs(a - b) / abs(b) for a, b in zip(losses(g16), losses(cpu)))
strip = lambda rows: [{k: v for k, v in r.items() if k == "loss" or k == "grad_norm" or k.startswith("moe_load")}
                      for r in rows]
same = strip(g16) == strip(g16o)
print(f"cpu fp32 losses: first {losses(cpu)[0]:.4f} last {losses(cpu)[-1]:.4f}")
print(f"gpu fp32: max relative difference {e32:.2e} (limit 1e-4)")
print(f"gpu bf16: max relative difference {e16:.2e} (limit 2e-2); last {losses(g16)[-1]:.4f}")
print(f"gpu bf16 overlap on vs off: {'identical' if same else 'DIFFERENT'} losses, norms and loads")
ok = len(cpu) == len(g32) == len(g16) == 30 and e32 <= 1e-4 and e16 <= 2e-2 and \
    losses(g16)[-1] < losses(g16)[0] - 0.3 and same
sys.exit(0 if ok else 1)
