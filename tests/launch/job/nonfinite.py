#!/usr/bin/env python3
"""Non-finite loss or gradients (a NaN injected into one rank's loss of one step; the loss is
reduced over the ranks, so all of them see it). train.on_nonfinite: skip — the update of that step
is skipped on every rank, counted, marked in metrics.jsonl, and training goes on (exit 0).
train.on_nonfinite: stop — the state before the step is checkpointed, the message says what to
do, attempt_end is "nonfinite" and the exit code 3; a resume from that checkpoint continues
exactly as a run that never met the NaN. A non-finite gradient with a finite loss (TETRA_FAULT
nan_grad: one element of one parameter's gradient on one rank, before the reduction) is caught by
the gradient norm alike: skipped with its finite loss logged, or stopped. Skipping is bounded by
train.max_skipped_steps (in a row, and a share of the steps so far): past it the run stops with
exit 3, and the report counts skipped steps as badput, not as kept.

usage: nonfinite.py TETRA_BIN WORK_DIR"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, checkpoint_steps, ledger, losses, metrics, state_of  # noqa: E402

EXIT_NONFINITE = 3
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=10, every=4)

ws.train("skip", fault="nan@3:rank=1")
m = metrics(ws.run_dir("skip"))
check(m[3].get("skipped") is True and m[3]["loss"] is None, "skip: step 3 is marked skipped with a null loss")
check(all(not m[s].get("skipped") for s in m if s != 3) and max(m) == 10, "skip: every other step trained, to 10")
meta, _ = state_of(os.path.join(ws.run_dir("skip"), "checkpoints", "step_8"))
check(meta["skipped_steps"] == 1 and meta["optimizer_steps"] == 7, "skip: step_8 counts 1 skipped, 7 updates")

out, err, _ = ws.train("stop", sets=["train.on_nonfinite=stop"], fault="nan@6:rank=0", expect=EXIT_NONFINITE)
run = ws.run_dir("stop")
check("step 6 had a non-finite loss or gradient norm" in out and "saved the state after step 5" in out,
      "stop: the message names the step and the checkpoint")
check(checkpoint_steps(run) == [4, 5] and max(metrics(run)) == 6, "stop: step_5 holds the state before step 6")
ends = [(e["reason"], e["exit_code"]) for e in ledger(run) if e["event"] == "attempt_end"]
check(ends == [("nonfinite", EXIT_NONFINITE)], "stop: attempt_end nonfinite (3)")
meta, _ = state_of(os.path.join(run, "checkpoints", "step_5"))
check(meta["step"] == 5 and meta["optimizer_steps"] == 5 and meta["skipped_steps"] == 0,
      "stop: step_5 is the state after 5 updates")
ws.train("stop", sets=["train.on_nonfinite=stop", "checkpoint.resume=auto"])
ws.train("clean")
check(losses(run) == losses(ws.run_dir("clean")),
      "stop: resumed without the fault, the run equals one that never met it, step for step")
# A NaN in one gradient element of rank 1, the loss finite (ZeRO-2: the gradient is reduce-scattered).
for stage in (0, 2):
    name = f"grad_skip{stage}"
    _, err, _ = ws.train(name, sets=[f"parallel.zero_stage={stage}"], fault="nan_grad@3:rank=1")
    check("rank 1 makes a gradient element of" in err, f"nan_grad stage {stage}: the drill poisoned a gradient")
    m = metrics(ws.run_dir(name))
    check(m[3].get("skipped") is True and m[3]["loss"] is not None and m[3]["grad_norm"] is None,
          f"nan_grad stage {stage}: step 3 skipped, its loss finite, its gradient norm not")
    meta, _ = state_of(os.path.join(ws.run_dir(name), "checkpoints", "step_8"))
    check(meta["skipped_steps"] == 1 and meta["optimizer_steps"] == 7, f"nan_grad stage {stage}: 1 skipped, 7 updates")
out, _, _ = ws.train("grad_stop", sets=["train.on_nonfinite=stop"], fault="nan_grad@6:rank=1", expect=EXIT_NONFINITE)
run = ws.run_dir("grad_stop")
check("step 6 had a non-finite loss or gradient norm" in out and checkpoint_steps(run) == [4, 5],
      "nan_grad stop: exit 3, step_5 holds the state before step 6")
check(metrics(run)[6]["loss"] is not None, "nan_grad stop: step 6's loss was finite")

# train.max_skipped_steps: skipping is bounded. Eleven non-finite steps in a row (3..13) pass the
# default of 10 in a row: the run stops with exit 3 naming them, a checkpoint of where it got to.
def nan_steps(steps):
    return ",".join(f"nan@{s}:rank=1" for s in steps)


def last_attempt_end(run):
    return [(e["reason"], e["exit_code"]) for e in ledger(run) if e["event"] == "attempt_end"][-1]


def goodput(run):
    with open(os.path.join(run, "goodput.json")) as f:
        return json.load(f)


out, _, _ = ws.train("streak", sets=["train.steps=20"], fault=nan_steps(range(3, 14)), expect=EXIT_NONFINITE)
run = ws.run_dir("streak")
done = max(metrics(run))  # 13, or 14 where step 14 was launched ahead of step 13's read-back
check("11 steps in a row (3..13) were skipped for a non-finite loss or gradient norm, more than "
      "train.max_skipped_steps.consecutive = 10" in out and
      "steps 3..13" in out and f"saved the state after step {done} " in out and done in (13, 14),
      "11 skipped in a row: exit 3, the message names the bound and the steps")
check(checkpoint_steps(run)[-1] == done and last_attempt_end(run) == ("nonfinite", EXIT_NONFINITE),
      "11 skipped in a row: the state saved, attempt_end nonfinite (3)")
g = goodput(run)
check(g["steps"]["kept"] == done - 11 and g["steps"]["skipped"] == 11 and g["seconds"]["skipped_steps"] > 0,
      "11 skipped in a row: the report counts them as skipped (badput), not kept")
# The share: at most 3 in a row and 20 % of the steps so far; every other step non-finite passes
# the share at step 8 (4 of 8 skipped, more than 3 in all).
out, _, _ = ws.train("share", sets=["train.steps=20", "train.max_skipped_steps.consecutive=3",
                                    "train.max_skipped_steps.fraction=0.2"],
                     fault=nan_steps(range(2, 21, 2)), expect=EXIT_NONFINITE)
check("4 of the 8 steps so far were skipped for a non-finite loss or gradient norm, more than "
      "train.max_skipped_steps.fraction = 0.2" in out and
      "steps 2, 4, 6, 8" in out, "every other step skipped: exit 3 at step 8, by the share")
# Within the bounds the run finishes; its report shows the skipped step as badput.
g = goodput(ws.run_dir("skip"))
check(g["steps"]["kept"] == 9 and g["steps"]["skipped"] == 1, "one skipped step of 10: 9 kept, 1 skipped")
print("PASS")
