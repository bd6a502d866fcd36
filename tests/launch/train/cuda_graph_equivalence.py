#!/usr/bin/env python3
"""CUDA graphs: train.cuda_graphs captures the third and fourth steps (one graph per step parity,
two steps being in flight) and replays them; the losses equal the eager run's (the same kernels on the same inputs) on one GPU with gradient accumulation, clipping
and a poisoned (non-finite, skipped) step, which runs eagerly between replays, and with an fp32
residual stream (train.residual_dtype). With --gpus 2, on
two GPUs at ZeRO stages 0 and 2 the graphs' losses equal the eager two-GPU run's. Exits 77
(skipped) with fewer GPUs than it needs, so a one-GPU machine reports the two-GPU part Skipped.

usage: cuda_graph_equivalence.py TETRA_BIN WORK_DIR [--gpus 1|2]"""
import os, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from script_util import ENV, licence_run_config, require_gpus, step_losses

tetra, work = sys.argv[1], sys.argv[2]
need = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--gpus" else 1
require_gpus(need)
cfg = licence_run_config(tetra, work, """
model: {arch: gpt2, vocab_size: 256, seq_len: 128, d_model: 128, n_layers: 4, n_heads: 4}
train: {steps: 24, global_batch: 16, micro_batch: 4, device: cuda, precision: bf16, grad_clip: 0.5, on_nonfinite: skip}
optimizer: {lr: 2.0e-3, betas: [0.9, 0.95], weight_decay: 0.1, warmup_steps: 5, schedule: cosine, min_lr: 2.0e-4}
""")


def run(name, np_, graphs, stage=0, fault=None, residual="bf16"):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_), tetra, "train", cfg,
           "--set", f"run.name={name}", "--set", f"train.cuda_graphs={'true' if graphs else 'false'}",
           "--set", f"parallel.zero_stage={stage}", "--set", f"train.residual_dtype={residual}"]
    env = dict(ENV)
    if residual != "bf16":  # compared across two processes: the heuristic's GEMM algorithms, untimed
        env["TETRA_GEMM_TUNE"] = "0"
    if fault:
        env["TETRA_FAULT"] = fault
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        sys.exit(f"FAIL: {name} exited {r.returncode}")
    if graphs and "captured as a CUDA graph" not in r.stdout:
        print(r.stdout[-3000:])
        sys.exit(f"FAIL: {name}: no step was captured")
    return step_losses(os.path.join(work, "runs", name))


def compare(what, got, want, limit):
    if len(got) != len(want):
        print(f"{what}: {len(got)} steps against {len(want)}: FAIL")
        return False
    worst = 0.0
    for a, b in zip(got, want):
        if a is None or b is None:
            if not (a is None and b is None):
                print(f"{what}: a skipped step differs: FAIL")
                return False
            continue
        worst = max(worst, abs(a - b) / abs(b))
    good = worst <= limit
    print(f"{what}: max relative loss difference {worst:.2e} (limit {limit:g}) {'ok' if good else 'FAIL'}")
    return good


ok = True
if need == 1:
    eager = run("eager", 1, False, fault="nan@9")
    graph = run("graph", 1, True, fault="nan@9")
    ok &= compare("1 GPU, graph vs eager (step 9 poisoned)", graph, eager, 1e-6)
    ok &= eager[-1] is not None and eager[-1] < eager[0] - 0.3
    # An fp32 residual stream (its widened biases and bf16 stream-gradient copies are allocated in the step).
    eager_r = run("eager_fp32_residual", 1, False, residual="fp32")
    graph_r = run("graph_fp32_residual", 1, True, residual="fp32")
    ok &= compare("1 GPU, fp32 residual stream, graph vs eager", graph_r, eager_r, 1e-6)
else:
    for stage in (0, 2):
        e2 = run(f"eager2_stage{stage}", 2, False, stage)
        g2 = run(f"graph2_stage{stage}", 2, True, stage)
        ok &= compare(f"2 GPUs stage {stage}, graph vs eager", g2, e2, 1e-6)
sys.exit(0 if ok else 1)
