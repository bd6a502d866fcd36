#!/usr/bin/env python3
"""Pipeline parallelism reproduces the single-rank run (docs/pipeline.md): every schedule
at pp 2 and 4 (and pp 2 × dp 2 over the ZeRO stages), with recomputation on and off, gives the
one-rank run's per-step loss and gradient norm within 1e-6 (relative) and its final weights within
1e-5 (norm-wise relative per tensor), fp32 on the CPU backend under mpirun, optimizer.eps 1e-3 (the
equivalence tests' scheme, tests/tetra_runs.py: its floors and the bugs it was checked against, on
this test's dp2 group). Each rank's measured peak of micro-batches in flight equals the
simulator's (the trainer prints both; `tetra plan --json` gives the simulator's independently).
The `llama` group does the same for Llama, its output layer tied and untied. The `resume` group
kills a pp 2 run and resumes it (bit for bit the uninterrupted run), and moves a
checkpoint across pipeline layouts and schedules: pp 2 dualpipev → pp 1 → pp 4 1f1b.

usage: pp_equivalence.py TETRA_BIN WORK_DIR GROUP   (GROUP: pp2, pp4, dp2, recompute, resume, llama)
"""
import json
import os
import re
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import (EQUIVALENCE_EPS, EQUIVALENCE_TOL as TOL, EQUIVALENCE_WEIGHTS_TOL as WTOL,  # noqa: E402
                        Workspace, check, compare_states, metrics, relative as rel, state_of, weights_difference)

tetra, work, group = sys.argv[1], sys.argv[2], sys.argv[3]
SCHEDULES = ["gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "dualpipe", "dualpipev"]
STEPS = 3
# 8 blocks of a 32-wide GPT-2 (interleaved_1f1b and dualpipev at pp 4 cut it into 8 stages);
# 8 micro-batches of one sequence per step at dp 1, 4 at dp 2.
COMMON = ["model.n_layers=8", "train.micro_batch=1", "train.global_batch=8", EQUIVALENCE_EPS]

ws = Workspace(tetra, os.path.join(work, group), steps=STEPS, every=STEPS)


def train(name, pp, dp, schedule="1f1b", extra=(), **kw):
    sets = COMMON + [f"parallel.pp={pp}", f"parallel.dp={dp}", f"parallel.schedule={schedule}"] + list(extra)
    return ws.train(name, np_=pp * dp, sets=sets, **kw)


def final_state(name, step=STEPS):
    return state_of(os.path.join(ws.run_dir(name), "checkpoints", f"step_{step}"))[1]


def compare_runs(name, base):
    """Worst relative differences of loss (and validation loss) and grad norm (per step) and worst
    norm-wise relative difference of a final weight tensor between run `name` and run `base`."""
    a, b = metrics(ws.run_dir(name)), metrics(ws.run_dir(base))
    check(sorted(a) == sorted(b) == list(range(1, STEPS + 1)), f"{name}: every step logged")
    loss = max(rel(a[s]["loss"], b[s]["loss"]) for s in b)
    for s in b:
        if "val_loss" in b[s]:
            check("val_loss" in a[s], f"{name}: evaluated at step {s}")
            loss = max(loss, rel(a[s]["val_loss"], b[s]["val_loss"]))
    norm = max(rel(a[s]["grad_norm"], b[s]["grad_norm"]) for s in b)
    wa, wb = final_state(name), final_state(base)
    check(wa.keys() == wb.keys(), f"{name}: the checkpoint holds every parameter")
    return loss, norm, weights_difference(wa, wb)


def peaks_line(out):
    m = re.search(r"pipeline peak activations per rank \[([0-9, ]*)\] \(simulated \[([0-9, ]*)\]\)", out)
    check(m is not None, "the trainer prints the measured and simulated peak activations")
    parse = lambda s: [int(x) for x in s.split(",")]
    return parse(m.group(1)), parse(m.group(2))


def plan_peaks(pp, dp, schedule):
    sets = COMMON + [f"parallel.pp={pp}", f"parallel.dp={dp}", f"parallel.schedule={schedule}"]
    args = [tetra, "plan", ws.cfg, "--world", str(pp * dp), "--json"]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, env=ws.env)
    check(r.returncode == 0, f"tetra plan --json for pp {pp} {schedule}: {r.stderr.strip()}")
    return json.loads(r.stdout)["pipeline"]["peak_activations"]


def equivalence(variants, base_extra=()):
    train("base", 1, 1, extra=base_extra)
    failed = []
    for name, pp, dp, schedule, extra in variants:
        out, _, _ = train(name, pp, dp, schedule, extra=list(base_extra) + list(extra))
        loss, norm, weights = compare_runs(name, "base")
        ok = loss <= TOL and norm <= TOL and weights <= WTOL
        print(f"{name}: pp {pp} dp {dp} {schedule} {' '.join(extra)}: loss {loss:.1e}, grad norm {norm:.1e}, "
              f"weights {weights:.1e} {'ok' if ok else 'FAIL'}", flush=True)
        if not ok:
            failed.append(name)
        measured, simulated = peaks_line(out)
        check(measured == simulated, f"{name}: peak activations per rank {measured} equal the simulator's {simulated}")
        check(simulated == plan_peaks(pp, dp, schedule), f"{name}: and tetra plan --json's")
    check(not failed, f"every variant equals the one-rank run within {TOL} (weights {WTOL}; {len(variants)} variants)")


if group == "pp2":
    # With an evaluation at the end: a forward-only schedule, its loss summed over the pipeline.
    equivalence([(f"pp2_{s}", 2, 1, s, []) for s in SCHEDULES],
                base_extra=["data.val_fraction=0.05", f"train.eval_every={STEPS}", "train.eval_batches=2"])
elif group == "pp4":
    equivalence([(f"pp4_{s}", 4, 1, s, []) for s in SCHEDULES])
elif group == "dp2":
    # pp 2 × dp 2, the ZeRO stages spread over the schedules.
    stages = {"gpipe": 0, "1f1b": 1, "interleaved_1f1b": 2, "zb_h1": 3, "dualpipe": 3, "dualpipev": 2}
    equivalence([(f"dp2_{s}", 2, 2, s, [f"parallel.zero_stage={stages[s]}"]) for s in SCHEDULES])
elif group == "recompute":
    equivalence([(f"rc_{s}", 2, 1, s, []) for s in SCHEDULES], base_extra=["train.recompute=full"])
    # The MLP-only mode on the two schedules that split B from W (W reads what recompute rebuilds).
    for s in ["zb_h1", "dualpipev"]:
        train(f"mlp_{s}", 2, 1, s, extra=["train.recompute=mlp"])
    train("mlp_base", 1, 1, extra=["train.recompute=mlp"])
    for s in ["zb_h1", "dualpipev"]:
        loss, norm, weights = compare_runs(f"mlp_{s}", "mlp_base")
        check(max(loss, norm) <= TOL and weights <= WTOL, f"recompute mlp, {s}: loss {loss:.1e} norm {norm:.1e} weights {weights:.1e}")
elif group == "llama":
    # Llama (grouped-query attention, SwiGLU, RMSNorm; the output layer untied, then tied across the
    # first and last stage) at pp 2 under every schedule, and pp 4 under the two DualPipes.
    llama = ["model.arch=llama", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_dim=64"]
    COMMON[:] = COMMON + llama
    equivalence([(f"llama_{s}", 2, 1, s, []) for s in SCHEDULES] +
                [(f"llama_pp4_{s}", 4, 1, s, []) for s in ["dualpipe", "dualpipev"]])
    tied = ["model.tie_embeddings=true"]
    train("tied_base", 1, 1, extra=tied)
    for s in ["1f1b", "interleaved_1f1b", "dualpipev"]:
        train(f"tied_{s}", 2, 1, s, extra=tied)
        loss, norm, weights = compare_runs(f"tied_{s}", "tied_base")
        check(max(loss, norm) <= TOL and weights <= WTOL,
              f"Llama with a tied output layer, pp 2 {s}: loss {loss:.1e} norm {norm:.1e} weights {weights:.1e}")
elif group == "resume":
    # Kill one rank of a pp 2 run after step 4, resume: bit for bit the uninterrupted run.
    steps, every = 6, 3
    ws2 = Workspace(tetra, os.path.join(work, group, "kill"), steps=steps, every=every)
    sets = COMMON + ["parallel.pp=2", "parallel.dp=1", "parallel.schedule=zb_h1"]
    ws2.train("base", np_=2, sets=sets)
    _, _, rc = ws2.train("crash", np_=2, sets=sets, fault="kill@4:rank=1", expect=None)
    check(rc != 0, f"the killed pp 2 job exits non-zero ({rc})")
    out, _, _ = ws2.train("crash", np_=2, sets=sets + ["checkpoint.resume=auto"])
    check("resumed from" in out and "step_3" in out, "the pp 2 run resumed from step_3")
    a, b = metrics(ws2.run_dir("crash")), metrics(ws2.run_dir("base"))
    check(all(a[s]["loss"] == b[s]["loss"] for s in b), "every step's loss equals the uninterrupted pp 2 run's exactly")
    worst, n = compare_states(os.path.join(ws2.run_dir("base"), "checkpoints", f"step_{steps}"),
                              os.path.join(ws2.run_dir("crash"), "checkpoints", f"step_{steps}"))
    check(worst == 0.0, f"step_{steps}: the state of all {n} parameters equals the uninterrupted run's bit for bit")

    # Reshard: pp 2 dualpipev (steps 1–3) → pp 1 (4–6) → pp 4 1f1b (7–9), against pp 1 throughout.
    # Every run is configured for 9 steps (the learning-rate schedule); SIGTERM after step 3 or 6
    # stops one with its checkpoint (exit code 75), which the next resumes on another layout.
    ws3 = Workspace(tetra, os.path.join(work, group, "reshard"), steps=9, every=3)
    layout = lambda pp, s: COMMON + [f"parallel.pp={pp}", "parallel.dp=1", f"parallel.schedule={s}"]
    ws3.train("base", np_=1, sets=layout(1, "1f1b"))
    ws3.train("a", np_=2, sets=layout(2, "dualpipev"), fault="term@3", expect=75)
    ws3.train("b", np_=1, sets=layout(1, "1f1b") + [f"checkpoint.resume={ws3.run_dir('a')}/checkpoints/step_3"],
              fault="term@6", expect=75)
    out, _, _ = ws3.train("c", np_=4, sets=layout(4, "1f1b") + [f"checkpoint.resume={ws3.run_dir('b')}/checkpoints/step_6"])
    check("resharded" in out, "the pp 4 run says it resharded the checkpoint")
    base = metrics(ws3.run_dir("base"))
    got = {**metrics(ws3.run_dir("a")), **metrics(ws3.run_dir("b")), **metrics(ws3.run_dir("c"))}
    check(sorted(got) == list(range(1, 10)), "the three runs trained steps 1–9 between them")
    worst = max(rel(got[s]["loss"], base[s]["loss"]) for s in range(1, 10))
    check(worst <= TOL, f"pp 2 dualpipev → pp 1 → pp 4 1f1b follows the pp 1 run's losses (worst {worst:.1e})")
    _, sc = state_of(os.path.join(ws3.run_dir("c"), "checkpoints", "step_9"))
    _, sb = state_of(os.path.join(ws3.run_dir("base"), "checkpoints", "step_9"))
    worst = weights_difference(sc, sb)
    check(worst <= WTOL, f"and ends with its weights (worst norm-wise difference {worst:.1e})")
else:
    sys.exit(f"unknown group {group}")
print("PASS")
