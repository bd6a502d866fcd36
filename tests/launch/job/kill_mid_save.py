#!/usr/bin/env python3
"""kill -9 in the middle of a checkpoint write (TETRA_FAULT kill_in_save: the rank raises SIGKILL
on itself once half of its rank file is written), during a synchronous save and during an
asynchronous one (on the writer thread, while training goes on). The interrupted checkpoint is
never loaded: resume auto loads the last complete one, the run finishes bit for bit as the
uninterrupted one (losses and final state), no step_N.tmp is left, and the report
counts the steps done after the last complete checkpoint as lost.

usage: kill_mid_save.py TETRA_BIN WORK_DIR"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, checkpoint_steps, compare_states, ledger, losses  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=12, every=4)
# ZeRO-1: both ranks hold a shard, so each has pieces to be cut in the middle of.
common = ["parallel.zero_stage=1"]
ws.train("base", sets=common)
base = ws.run_dir("base")
base_losses = losses(base)

for mode, victim in (("sync", 0), ("async", 1)):
    name = f"kill_{mode}"
    sets = common + (["checkpoint.async=true"] if mode == "async" else [])
    _, err, rc = ws.train(name, sets=sets, fault=f"kill_in_save@8:rank={victim}", expect=None)
    run = ws.run_dir(name)
    check(rc != 0, f"{mode}: the killed job exits non-zero (mpirun: {rc})")
    check(f"rank {victim} raises SIGKILL on itself while writing its file of the checkpoint of step 8" in err,
          f"{mode}: rank {victim} was killed inside the write of step_8")
    names = os.listdir(os.path.join(run, "checkpoints"))
    check(checkpoint_steps(run) == [4] and "step_8.tmp" in names, f"{mode}: step_8 stays step_8.tmp, step_4 is whole")
    check(not os.path.exists(os.path.join(run, "checkpoints", "step_8.tmp", "meta.json")),
          f"{mode}: the interrupted checkpoint has no meta.json")
    first = [e for e in ledger(run) if e["attempt"] == 1]
    last_step = max(e["step"] for e in first if e["event"] == "step")
    check(not any(e["event"] == "attempt_end" for e in first) and last_step >= 8,
          f"{mode}: attempt 1 crashed after recording steps up to {last_step}")

    out, _, _ = ws.train(name, sets=sets + ["checkpoint.resume=auto"])
    check("resumed from" in out and "step_4" in out, f"{mode}: attempt 2 resumed from step_4")
    check(not any(n.endswith(".tmp") for n in os.listdir(os.path.join(run, "checkpoints"))),
          f"{mode}: the leftover step_8.tmp is gone (replaced by the new save of step 8)")
    check(losses(run) == base_losses, f"{mode}: every step's loss equals the uninterrupted run's exactly")
    worst, n = compare_states(os.path.join(base, "checkpoints", "step_12"), os.path.join(run, "checkpoints", "step_12"))
    check(worst == 0.0, f"{mode}: the final state of all {n} parameters equals the uninterrupted run's bit for bit")
    with open(os.path.join(run, "goodput.json")) as f:
        g = json.load(f)
    lost = last_step - 4
    check(g["restarts"] == 1 and g["finished"] and g["steps"]["lost"] == lost and g["steps"]["kept"] == 12,
          f"{mode}: the report counts {lost} lost steps (5..{last_step}), 12 kept, 1 restart")
print("PASS")
