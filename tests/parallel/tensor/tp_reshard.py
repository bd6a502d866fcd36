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
4. Llama with 2 key/value heads, each replicated over 2 ranks at tp 4: resharding tp 4 -> 1 -> 2 as in
   1 (the replicated heads are written once, by the first of their ranks), and training on at tp 4
   from the tp 2 checkpoint.

usage: tp_reshard.py TETRA_BIN WORK_DIR"""
import os
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, checkpoint_steps, compare_states, losses, state_of  # noqa: E402

NONFINITE_EXIT = 3  # launch/job/signals.h exit_code::kNonFinite

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


def reload_at(run, np_, tp, source, w=None, sets=(HEADS,)):
    """Resumes `source` at tp (np_ ranks) and stops before its first update: saves what it loaded."""
    w = w or ws
    fault = ",".join(f"nan@5:rank={r}" for r in range(np_))
    out, _, _ = w.train(run, np_, list(sets) + [f"parallel.tp={tp}", "train.on_nonfinite=stop",
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
# Llama, 4 query heads over 2 key/value heads of 8 channels: at tp 4 each key/value head is replicated
# over 2 ranks; at tp 2 they split; at tp 1 they are whole.
lw = Workspace(tetra, os.path.join(work, "llama_kv2"), steps=8, every=4,
               base_sets=["model.arch=llama", "model.n_heads=4", "model.n_kv_heads=2"])


def lstep(run, step):
    return os.path.join(lw.run_dir(run), "checkpoints", f"step_{step}")


def lconsolidated(run, step):
    out = os.path.join(lw.work, f"{run}_step{step}.h5")
    lw.tetra_cmd("ckpt", "consolidate", lstep(run, step), "--out", out)
    with h5py.File(out, "r") as f:
        return {n: f[n][()] for n in f.keys()}


out, _, _ = lw.train("tp4", 4, ["parallel.tp=4"])
check("tensor parallel over 4 ranks" in out, "Llama with 2 key/value heads trains at tp 4")
meta4, _ = state_of(lstep("tp4", 4))
kv_pieces = [p for f in meta4["files"] for p in f["pieces"] if p[0].endswith("qkv_proj.weight")]
check(len(kv_pieces) > 0, "the tp=4 checkpoint holds pieces of the fused q | k | v weights")
reload_at("tp1", 1, 1, lstep("tp4", 4), w=lw, sets=())
reload_at("tp2", 2, 2, lstep("tp1", 4), w=lw, sets=())
for a, b in (("tp4", "tp1"), ("tp1", "tp2")):
    worst, n = compare_states(lstep(a, 4), lstep(b, 4))
    check(worst == 0.0, f"llama kv 2: {a} -> {b}: the state of all {n} parameters equal bit for bit")
l4, l1, l2 = lconsolidated("tp4", 4), lconsolidated("tp1", 4), lconsolidated("tp2", 4)
k = "model.layers.0.self_attn.k_proj.weight"
check(k in l4 and l4[k].shape == (16, 32), f"the consolidated file holds {k} whole, [2 heads · 8, 32]")
same = all(l4.keys() == c.keys() and all(l4[n].tobytes() == c[n].tobytes() and l4[n].shape == c[n].shape
                                         for n in l4) for c in (l1, l2))
check(same, f"tetra ckpt consolidate writes the same {len(l4)} Llama tensors, bit for bit, from tp 4, 1 and 2")
lw.train("tp2_full", 2, ["parallel.tp=2"])
lw.train("tp4_on", 4, ["parallel.tp=4", f"checkpoint.resume={lstep('tp2_full', 4)}"])
ref, got = losses(lw.run_dir("tp2_full")), losses(lw.run_dir("tp4_on"))
worst = max(abs(got[s] - ref[s]) / abs(ref[s]) for s in range(5, 9))
check(sorted(got) == [5, 6, 7, 8] and worst <= 1e-5,
      f"llama kv 2: tp 2 -> tp 4 (replicated key/value heads) trains steps 5..8 as the uninterrupted run "
      f"(worst loss difference {worst:.1e})")
print("PASS")
