#!/usr/bin/env python3
"""Checkpoints across tensor-parallel sizes, through `tetra train` under mpirun (CPU, fp32):

1. Resharding tp 2 -> 1 -> 4 is lossless. A tp=2 run saves step_4; a tp=1 run resumes from it and
   a tp=4 run from that one. Each resumed run's step 5 is made non-finite on every rank
   (TETRA_FAULT nan@5, train.on_nonfinite: stop), so it stops and saves the state it loaded,
   untouched, as its own step_4: the three checkpoints hold the same state bit for bit (master,
   exp_avg, exp_avg_sq), and `tetra ckpt consolidate` writes the same HF-named tensors from each.
2. A run resumed at another tp trains on as the uninterrupted one (losses within 1e-5).
3. kill -9 one rank of a tp=2 × dp=2 run, resume with checkpoint.resume: auto: the same losses and
   final state bit for bit as the run that was never interrupted.

usage: tp_reshard.py TETRA_BIN WORK_DIR"""
import os
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoint"))
from tetra_runs import Workspace, check, checkpoint_steps, compare_states, losses, state_of  # noqa: E402

NONFINITE_EXIT = 3  # launch/signals.h exit_code::kNonFinite

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=8, every=4)
# 4 heads of 8 channels: tp 1, 2 and 4 all divide them (and the vocabulary of 256).
HEADS = "model.n_heads=4"


def step_dir(run, step):
    return os.path.join(ws.run_dir(run), "checkpoints", f"step_{step}")


def consolidated(run, step):
    out = os.path.join(ws.work, f"{run}_step{step}.h5")
    ws.tetra_cmd("ckpt", "consolidate", step_dir(run, step), "--out", out)
    with h5py.File(out, "r") as f:
        return {n: f[n][()] for n in f.keys()}


def reload_at(run, np_, tp, source):
    """Resumes `source` at tp (np_ ranks) and stops before its first update: saves what it loaded."""
    fault = ",".join(f"nan@5:rank={r}" for r in range(np_))
    out, _, _ = ws.train(run, np_, [HEADS, f"parallel.tp={tp}", "train.on_nonfinite=stop",
                                    f"checkpoint.resume={source}"], fault=fault, expect=NONFINITE_EXIT)
    return out


ws.train("tp2", 2, [HEADS, "parallel.tp=2"])
meta2, _ = state_of(step_dir("tp2", 4))
check(meta2["mesh"]["tp"] == 2 and any(len(p) == 4 for f in meta2["files"] for p in f["pieces"]),
      "the tp=2 checkpoint's pieces are boxes of the full tensors")

out = reload_at("tp1", 1, 1, step_dir("tp2", 4))
check("resharded to dp 1 tp 1" in out, "the tp=1 run says it resharded the tp=2 checkpoint")
out = reload_at("tp4", 4, 4, step_dir("tp1", 4))
check("written at dp 1 tp 1 pp 1 ZeRO-0, resharded to dp 1 tp 4" in out, "the tp=4 run resharded the tp=1 one")

for a, b in (("tp2", "tp1"), ("tp1", "tp4")):
    worst, n = compare_states(step_dir(a, 4), step_dir(b, 4))
    check(worst == 0.0, f"{a} -> {b}: master, exp_avg, exp_avg_sq of all {n} parameters equal bit for bit")
c2, c1, c4 = consolidated("tp2", 4), consolidated("tp1", 4), consolidated("tp4", 4)
check("transformer.h.0.attn.c_attn.weight" in c2 and "transformer.wte.weight" in c2,
      "the consolidated file holds Hugging Face's names")
same = all(c2.keys() == c.keys() and all(c2[k].tobytes() == c[k].tobytes() and c2[k].shape == c[k].shape
                                         for k in c2) for c in (c1, c4))
check(same, f"tetra ckpt consolidate writes the same {len(c2)} tensors, bit for bit, from tp 2, 1 and 4")

# Training on after resharding: tp=4 from the tp=2 checkpoint follows the uninterrupted tp=2 run.
out, _, _ = ws.train("tp4_on", 4, [HEADS, "parallel.tp=4", f"checkpoint.resume={step_dir('tp2', 4)}"])
ref, got = losses(ws.run_dir("tp2")), losses(ws.run_dir("tp4_on"))
worst = max(abs(got[s] - ref[s]) / abs(ref[s]) for s in range(5, 9))
check(sorted(got) == [5, 6, 7, 8] and worst <= 1e-5,
      f"tp 2 -> tp 4 trains steps 5..8 as the uninterrupted run (worst loss difference {worst:.1e})")

# Kill and resume at tp 2 (× dp 2, ZeRO-1): the uninterrupted run, bit for bit.
sets = [HEADS, "parallel.tp=2", "parallel.zero_stage=1"]
ws.train("base", 4, sets)
_, _, rc = ws.train("crash", 4, sets, fault="kill@6:rank=1", expect=None)
check(rc != 0 and checkpoint_steps(ws.run_dir("crash")) == [4], "the killed tp=2 job committed step_4 only")
out, _, _ = ws.train("crash", 4, sets + ["checkpoint.resume=auto"])
check("resumed from" in out and "step_4" in out, "the restarted tp=2 job resumed from step_4")
check(losses(ws.run_dir("crash")) == losses(ws.run_dir("base")), "every step's loss equals the uninterrupted run's")
worst, n = compare_states(step_dir("base", 8), step_dir("crash", 8))
check(worst == 0.0, f"step_8: the state of all {n} parameters equals the uninterrupted run's bit for bit")
print("PASS")
