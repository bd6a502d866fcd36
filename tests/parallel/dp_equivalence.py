#!/usr/bin/env python3
"""Data parallelism reproduces the single-rank run: the same global batch split over 1, 2 or 4
ranks and into different micro-batches gives the same per-step losses (1e-6 relative) and the
same final state: the checkpoint after the last step (master weights, exp_avg, exp_avg_sq of every
parameter, assembled from the rank files whatever the layout): every master tensor within 1e-5
norm-wise relative, each moment of the whole state within 1e-5 norm-wise relative, and no element
more than 2e-5 away. optimizer.eps 1e-3 and these limits are the equivalence tests' scheme
(tests/tetra_runs.py, docs/testing.md "Tolerances"); np1_mb2 (one rank, only the micro-batch split
changed) is its control. Runs `tetra train` under mpirun on the CPU backend.

Why not element-wise relative: the attention key bias has a zero gradient in exact arithmetic
(softmax ignores a constant added to a row's scores), so its gradient and moments are rounding
noise, relatively far apart between splits while the whole state agrees.

usage: dp_equivalence.py TETRA_BIN WORK_DIR [extra --set overrides for every run]
"""
import json, os, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: shared helpers
from script_util import ENV as env, licence_dataset, step_losses
from tetra_runs import EQUIVALENCE_EPS, EQUIVALENCE_TOL, EQUIVALENCE_WEIGHTS_TOL, state_of, weights_difference
import numpy as np

tetra, work = sys.argv[1], sys.argv[2]
extra = sys.argv[3:]
data = licence_dataset(tetra, work)
cfg = os.path.join(work, "cfg.yaml")
with open(cfg, "w") as f:
    f.write(f"""run: {{name: base, output_dir: {work}/runs, seed: 11}}
model: {{arch: gpt2, vocab_size: 256, seq_len: 32, d_model: 32, n_layers: 2, n_heads: 2}}
train: {{steps: 8, global_batch: 8, micro_batch: 8, device: cpu, precision: fp32, grad_clip: 1.0}}
optimizer: {{lr: 3.0e-3, betas: [0.9, 0.95], eps: {EQUIVALENCE_EPS.split("=")[1]}, weight_decay: 0.1, warmup_steps: 2, schedule: cosine, min_lr: 1.0e-4}}
data: {{train: {data}, shuffle: true}}
checkpoint: {{every: 8}}
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
    run_dir = os.path.join(work, "runs", name)
    check_exposed_per_axis(run_dir, dp)
    return step_losses(run_dir)

def check_exposed_per_axis(run_dir, dp):
    """Data-parallel runs record their exposed communication per mesh axis (only dp here): in
    metrics.jsonl as exposed_comm_ms_dp (the whole of exposed_comm_ms) and in the goodput report."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    for s in steps:
        axes = sorted(k for k in s if k.startswith("exposed_comm_ms_"))
        want = ["exposed_comm_ms_dp"] if dp > 1 else []
        if axes != want:
            sys.exit(f"FAIL: {run_dir} step {s['step']}: per-axis keys {axes}, expected {want}")
        if dp > 1 and abs(s["exposed_comm_ms_dp"] - s["exposed_comm_ms"]) > 1e-9:
            sys.exit(f"FAIL: {run_dir} step {s['step']}: exposed_comm_ms_dp {s['exposed_comm_ms_dp']} is not the "
                     f"total {s['exposed_comm_ms']} (dp is the only axis)")
    with open(os.path.join(run_dir, "goodput.json")) as f:
        report = json.load(f)
    if sorted(report["exposed_comm_by_axis"]) != (["dp"] if dp > 1 else []):
        sys.exit(f"FAIL: {run_dir}: goodput.json exposed_comm_by_axis {report['exposed_comm_by_axis']}")


def final_state(name):
    return state_of(os.path.join(work, "runs", name, "checkpoints", "step_8"))[1]


def state_difference(a, b):
    """(worst norm-wise relative difference over master / exp_avg / exp_avg_sq of the whole state,
    worst absolute element difference, where it is)."""
    if a.keys() != b.keys():
        return float("inf"), float("inf"), "different parameters"
    norm_rel, worst, where = 0.0, 0.0, ""
    for k in ("master", "exp_avg", "exp_avg_sq"):
        x = np.concatenate([a[n][k] for n in sorted(a)])
        y = np.concatenate([b[n][k] for n in sorted(a)])
        if x.shape != y.shape or not np.all(np.isfinite(x)):
            return float("inf"), float("inf"), k
        norm_rel = max(norm_rel, float(np.linalg.norm(x - y) / max(float(np.linalg.norm(y)), 1e-30)))
    for n in a:
        for k in a[n]:
            d = float(np.max(np.abs(a[n][k] - b[n][k])))
            if d > worst:
                worst, where = d, f"{n} {k}"
    return norm_rel, worst, where


variants = [("np1_mb8", 1, 1, 8), ("np1_mb2", 1, 1, 2), ("np2_mb4", 2, 2, 4), ("np2_mb1", 2, 2, 1),
            ("np4_mb2", 4, 4, 2), ("np4_mb1", 4, 4, 1)]
base = None
failed = False
for name, np_, dp, micro in variants:
    losses = run(name, np_, dp, micro)
    if base is None:
        base, base_state = losses, final_state(name)
        print(f"{name}: {['%.6f' % l for l in losses]}")
        continue
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, base))
    ok = len(losses) == len(base) and worst <= EQUIVALENCE_TOL
    failed |= not ok
    print(f"{name}: max relative loss difference {worst:.2e} {'ok' if ok else 'FAIL'}")
    state = final_state(name)
    norm_rel, worst, where = state_difference(state, base_state)
    weights = weights_difference(state, base_state)
    ok = weights <= EQUIVALENCE_WEIGHTS_TOL and norm_rel <= 1e-5 and worst <= 2e-5
    failed |= not ok
    print(f"{name}: final state: weights {weights:.2e} norm-wise per tensor (limit {EQUIVALENCE_WEIGHTS_TOL}), "
          f"{norm_rel:.2e} norm-wise over the state (limit 1e-5), worst element {worst:.2e} "
          f"(limit 2e-5, {where}) {'ok' if ok else 'FAIL'}")
if base[-1] >= base[0]:
    sys.exit("FAIL: loss did not fall")
sys.exit(1 if failed else 0)
