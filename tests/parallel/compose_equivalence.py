#!/usr/bin/env python3
"""Every parallelism at once reproduces the single-rank run (docs/pipeline.md "All four at
once"): dp 2 × tp 2 × pp 2 on 8 CPU ranks under mpirun (fp32), through `tetra train`.

Groups (one ctest each, so they run side by side and fail apart):
  dense    Llama (grouped-query attention, SwiGLU, untied output layer, sequence parallelism) at
           dp 2 × tp 2 × pp 2 under 1f1b and dualpipev, each with ZeRO 1 and ZeRO 3: every step's
           loss and gradient norm within 1e-6 (relative) of the 1-rank run's and the final weights
           within 1e-5, norm-wise per tensor (optimizer.eps 1e-3 in every group: the equivalence
           tests' scheme, tests/tetra_runs.py, where its floors and reasons are written).
  moe      a Llama of MoE layers with ep 2 carved out of dp 2, × pp 2 (tp 1: MoE layers do not run
           under tensor parallelism yet) under 1f1b with ZeRO 1, dualpipev with ZeRO 3 and dualpipe
           (whose mirrored stage copies reduce their experts' gradients together) with ZeRO 1 on 4 ranks:
           every MoE layer's max/mean expert load equal to the 1-rank run's at every step (the same
           routing), loss, gradient norm and final weights within 1e-6 as above.
  resume   kill -9 one rank of a dp 2 × tp 2 × pp 2 run (1f1b, ZeRO 1) after its step_3 checkpoint;
           resume that checkpoint on dp 4 × tp 2 × pp 1. Exact comparison: the uninterrupted
           8-rank run's step_3 is resumed on the same dp 4 × tp 2 layout, and the two continuations'
           step_6 states (master, exp_avg, exp_avg_sq) and consolidated tensors are equal bit for
           bit (the killed run's step_3 is the uninterrupted run's bit for bit, and a given layout
           computes the same bits from the same state). Across layouts, rounding differs: the
           resumed run's losses, gradient norms and final weights are also within those limits of
           the 1-rank run's.

usage: compose_equivalence.py TETRA_BIN WORK_DIR GROUP   (GROUP: dense, moe, resume)
"""
import os
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: shared helpers
from tetra_runs import (EQUIVALENCE_EPS, EQUIVALENCE_TOL as TOL, EQUIVALENCE_WEIGHTS_TOL as WTOL,  # noqa: E402
                        Workspace, check, checkpoint_steps, compare_states, metrics, relative as rel, state_of,
                        weights_difference)

tetra, work, group = sys.argv[1], sys.argv[2], sys.argv[3]
# 4 blocks of a 32-wide Llama: 4 heads and 2 key/value heads (one a rank at tp 2), so pp 2's
# dualpipev cuts it into 4 stages; 8 sequences of 32 tokens a step, one per micro-batch: 4
# micro-batches a step per pipeline at dp 2 (dualpipev needs 2·pp).
LLAMA = ["model.arch=llama", "model.n_layers=4", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_dim=64",
         "train.micro_batch=1", "train.global_batch=8", EQUIVALENCE_EPS]
t_start = time.time()
VARIANTS = [("1f1b", 1), ("1f1b", 3), ("dualpipev", 1), ("dualpipev", 3)]


def layout(dp, tp, pp, schedule="1f1b", zero=1):
    return [f"parallel.dp={dp}", f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.schedule={schedule}",
            f"parallel.zero_stage={zero}"]


def step_dir(ws, run, step):
    return os.path.join(ws.run_dir(run), "checkpoints", f"step_{step}")


def compare_runs(ws, run, base, steps, first=1):
    """Worst relative difference of the loss and of the gradient norm over steps first..steps, and
    the worst norm-wise relative difference of a final weight tensor, between `run` and `base`."""
    a, b = metrics(ws.run_dir(run)), metrics(ws.run_dir(base))
    want = list(range(first, steps + 1))
    check(sorted(a) == want and all(s in b for s in want), f"{run}: steps {first}..{steps} logged")
    loss = max(rel(a[s]["loss"], b[s]["loss"]) for s in want)
    norm = max(rel(a[s]["grad_norm"], b[s]["grad_norm"]) for s in want)
    _, sa = state_of(step_dir(ws, run, steps))
    _, sb = state_of(step_dir(ws, base, steps))
    check(sa.keys() == sb.keys(), f"{run}: the final checkpoint holds the same {len(sb)} tensors as {base}'s")
    check(all(not np.isnan(sa[n]["master"]).any() for n in sa), f"{run}: every element of every tensor saved")
    return loss, norm, weights_difference(sa, sb)


if group == "dense":
    STEPS = 3
    ws = Workspace(tetra, os.path.join(work, group), steps=STEPS, every=STEPS, base_sets=LLAMA)
    ws.train("base", np_=1, sets=layout(1, 1, 1, zero=0))
    failed = []
    for schedule, zero in VARIANTS:
        name = f"{schedule}_z{zero}"
        t0 = time.time()
        out, _, _ = ws.train(name, np_=8, sets=layout(2, 2, 2, schedule, zero), timeout=300)
        check("(dp 2 tp 2 pp 2)" in out, f"{name}: the run reports its 2 × 2 × 2 mesh")
        loss, norm, weights = compare_runs(ws, name, "base", STEPS)
        ok = max(loss, norm) <= TOL and weights <= WTOL
        print(f"{name}: dp 2 × tp 2 × pp 2 {schedule} ZeRO-{zero}: loss {loss:.1e}, grad norm {norm:.1e}, "
              f"weights {weights:.1e} (norm-wise) {'ok' if ok else 'FAIL'} ({time.time() - t0:.1f} s)", flush=True)
        if not ok:
            failed.append(name)
    check(not failed, f"dp 2 × tp 2 × pp 2 equals the one-rank run within {TOL} (weights {WTOL}; failed: {failed})")
elif group == "moe":
    # A Llama with MoE layers (8 experts, top 2 of 2-of-4 groups, a shared expert, a dense first
    # layer, the balance loss, a bias update that moves routing within the run), ep 2 inside dp 2.
    STEPS = 3
    moe = LLAMA + ["model.moe.n_experts=8", "model.moe.top_k=2", "model.moe.n_shared=1", "model.moe.ffn_dim=16",
                   "model.moe.first_k_dense=1", "model.moe.n_group=4", "model.moe.topk_group=2",
                   "model.moe.route_scale=1.5", "model.moe.aux_loss_coef=0.01", "model.moe.bias_update_rate=0.01"]
    ws = Workspace(tetra, os.path.join(work, group), steps=STEPS, every=STEPS, base_sets=moe)
    ws.train("base", np_=1, sets=layout(1, 1, 1, zero=0))
    loads = lambda run: {s: {k: v for k, v in m.items() if k.startswith("moe_load_max_over_mean_")}
                         for s, m in metrics(ws.run_dir(run)).items()}
    check(len(loads("base")[1]) == 3, "the 1-rank run logs the loads of its 3 MoE layers")
    failed = []
    for schedule, zero in [("1f1b", 1), ("dualpipev", 3), ("dualpipe", 1)]:
        name = f"{schedule}_z{zero}"
        t0 = time.time()
        ws.train(name, np_=4, sets=layout(2, 1, 2, schedule, zero) + ["parallel.ep=2"], timeout=300)
        check(loads(name) == loads("base"), f"{name}: every MoE layer's max/mean load equals the 1-rank run's each step")
        loss, norm, weights = compare_runs(ws, name, "base", STEPS)
        ok = max(loss, norm) <= TOL and weights <= WTOL
        print(f"{name}: MoE, ep 2 in dp 2 × pp 2 {schedule} ZeRO-{zero}: loss {loss:.1e}, grad norm {norm:.1e}, "
              f"weights {weights:.1e} (norm-wise) {'ok' if ok else 'FAIL'} ({time.time() - t0:.1f} s)", flush=True)
        if not ok:
            failed.append(name)
    check(not failed, f"MoE at dp 2 (ep 2) × pp 2 equals the one-rank run within {TOL} (weights {WTOL}; failed: {failed})")
elif group == "resume":
    STEPS, EVERY = 6, 3
    ws = Workspace(tetra, os.path.join(work, group), steps=STEPS, every=EVERY, base_sets=LLAMA)
    full = layout(2, 2, 2, "1f1b", 1)
    other = layout(4, 2, 1, "1f1b", 1)
    ws.train("one", np_=1, sets=layout(1, 1, 1, zero=0))
    ws.train("base", np_=8, sets=full, timeout=300)
    # kill -9 rank 5 (pp 1, dp 0, tp 1) in step 5: step_3 is the last whole checkpoint.
    _, _, rc = ws.train("crash", np_=8, sets=full, fault="kill@5:rank=5", expect=None, timeout=300)
    check(rc != 0 and checkpoint_steps(ws.run_dir("crash")) == [EVERY],
          f"the killed 8-rank job exited non-zero ({rc}) with step_{EVERY} its only checkpoint")
    worst, n = compare_states(step_dir(ws, "base", EVERY), step_dir(ws, "crash", EVERY))
    check(worst == 0.0, f"the killed run's step_{EVERY} equals the uninterrupted run's bit for bit ({n} tensors)")
    # Resume on dp 4 × tp 2 × pp 1: the killed run's checkpoint, and (the reference) the uninterrupted run's.
    out, _, _ = ws.train("resumed", np_=8, sets=other + [f"checkpoint.resume={step_dir(ws, 'crash', EVERY)}"],
                         timeout=300)
    check("resharded" in out, "the dp 4 × tp 2 × pp 1 run says it resharded the dp 2 × tp 2 × pp 2 checkpoint")
    ws.train("reference", np_=8, sets=other + [f"checkpoint.resume={step_dir(ws, 'base', EVERY)}"], timeout=300)
    a, b = metrics(ws.run_dir("resumed")), metrics(ws.run_dir("reference"))
    check(sorted(a) == sorted(b) == list(range(EVERY + 1, STEPS + 1)) and
          all(a[s]["loss"] == b[s]["loss"] and a[s]["grad_norm"] == b[s]["grad_norm"] for s in a),
          f"steps {EVERY + 1}..{STEPS}: loss and gradient norm equal the uninterrupted run's continuation bit for bit")
    worst, n = compare_states(step_dir(ws, "reference", STEPS), step_dir(ws, "resumed", STEPS))
    check(worst == 0.0, f"step_{STEPS}: master, exp_avg, exp_avg_sq of all {n} tensors equal bit for bit")
    full_tensors = {}
    for run in ("resumed", "reference"):
        path = os.path.join(ws.work, f"{run}_step{STEPS}.h5")
        ws.tetra_cmd("ckpt", "consolidate", step_dir(ws, run, STEPS), "--out", path)
        with h5py.File(path, "r") as f:
            full_tensors[run] = {k: f[k][()] for k in f.keys()}
    r, u = full_tensors["resumed"], full_tensors["reference"]
    check("model.layers.0.self_attn.q_proj.weight" in r and r.keys() == u.keys() and
          all(r[k].shape == u[k].shape and r[k].tobytes() == u[k].tobytes() for k in r),
          f"tetra ckpt consolidate writes the same {len(r)} Hugging Face-named tensors bit for bit")
    # Across layouts: the 1-rank run, within rounding. The resumed run logged steps 4..6 only.
    loss, norm, weights = compare_runs(ws, "resumed", "one", STEPS, first=EVERY + 1)
    check(max(loss, norm) <= TOL and weights <= WTOL,
          f"killed at dp 2 × tp 2 × pp 2, resumed at dp 4 × tp 2 × pp 1: the 1-rank run's losses ({loss:.1e}), "
          f"gradient norms ({norm:.1e}) within {TOL} and final weights ({weights:.1e}, norm-wise) within {WTOL}")
else:
    sys.exit(f"unknown group {group}")
print(f"PASS ({time.time() - t_start:.1f} s)")
