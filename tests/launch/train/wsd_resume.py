#!/usr/bin/env python3
"""optimizer.schedule: wsd end to end on 2 CPU ranks:
  - the LR of every step in metrics.jsonl is the formula written out here (linear warmup, lr in the
    stable phase, min + (lr - min)·(1 - sqrt(p)) over the last decay_steps);
  - a run stopped in its stable phase and resumed with a longer train.steps is the run started with
    that train.steps: the same LR and loss at every step and the same final state, bit for bit; the
    resume notes the change instead of warning of it;
  - resumed past its decay's start, or under cosine, the same change is still a warning;
  - the report page draws the LR of the wsd run.

usage: wsd_resume.py TETRA_BIN WORK_DIR"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, compare_states, losses, metrics  # noqa: E402

EXIT_PREEMPTED = 75
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=12, every=4)
LR, MIN_LR, WARMUP, DECAY = 3.0e-3, 1.0e-4, 2, 4  # the Workspace's optimizer, and the decay here
WSD = ["optimizer.schedule=wsd", f"optimizer.decay_steps={DECAY}", "optimizer.decay_shape=sqrt"]


def wsd_lr(step, steps):
    """The LR of 1-based step `step` of a run of `steps`."""
    if step <= WARMUP:
        return LR * step / WARMUP
    start = steps - DECAY  # the last stable step
    if step <= start:
        return LR
    return MIN_LR + (LR - MIN_LR) * (1 - math.sqrt((step - start) / DECAY))


def lrs(run):
    return {s: m["lr"] for s, m in metrics(run).items()}


# The uninterrupted 20-step run, and its LRs against the formula. The step applies the LR in fp32
# (the AdamW scalars) and metrics.jsonl logs that value: the formula rounded to fp32, a relative
# error of at most 2^-24; the limit 2^-23 is far below the ≥ 5% steps between neighbouring LRs
# of the decay, so a step off by one in the schedule fails.
ws.train("long", sets=WSD + ["train.steps=20"])
long = ws.run_dir("long")
got = lrs(long)
FP32 = 2.0 ** -23
check(sorted(got) == list(range(1, 21)), "the 20-step run logged every step")
worst = max(abs(got[s] - wsd_lr(s, 20)) / wsd_lr(s, 20) for s in got)
check(worst < FP32, f"every step's LR is the wsd formula's (worst relative difference {worst:.1e})")
check(got[16] == got[3] and abs(got[16] - LR) < FP32 * LR and got[17] < got[16] and
      abs(got[20] - MIN_LR) < FP32 * MIN_LR, "stable through step 16, the decay over steps 17..20 to min_lr")

# Stopped after step 6 of a 12-step run (its decay would start at step 9), resumed with 20 steps.
ws.train("ext", sets=WSD + ["train.steps=12"], fault="term@6", expect=EXIT_PREEMPTED)
ext = ws.run_dir("ext")
check(max(metrics(ext)) == 6, "the 12-step run stopped after step 6")
out, err, _ = ws.train("ext", sets=WSD + ["train.steps=20", "checkpoint.resume=auto"])
print(out[-1500:])
check("warning: train.steps" not in out + err, "extending a wsd run in its stable phase is no warning")
check("note: train.steps was 12 when step 6 was saved, now 20; the 6 steps run so far had the learning rates "
      "this schedule gives them" in out, "the resume notes the longer run")
check(lrs(ext) == lrs(long), "the extended run's LR at every step is the 20-step run's")
check(losses(ext) == losses(long), "its loss at every step is the 20-step run's, exactly")
worst, _ = compare_states(os.path.join(long, "checkpoints", "step_20"), os.path.join(ext, "checkpoints", "step_20"))
check(worst == 0.0, "its final state is the 20-step run's, bit for bit")

# Past the decay's start (step 10 of 12: steps 9 and 10 decayed), the same change is a warning.
ws.train("late", sets=WSD + ["train.steps=12"], fault="term@10", expect=EXIT_PREEMPTED)
out, _, _ = ws.train("late", sets=WSD + ["train.steps=20", "checkpoint.resume=auto"])
check("warning: train.steps was 12 when step 10 was saved, now 20" in out, "resumed inside the decay: a warning")
# So it is under cosine, whose every step after the warmup moves with train.steps.
ws.train("cos", sets=["train.steps=12"], fault="term@6", expect=EXIT_PREEMPTED)
out, _, _ = ws.train("cos", sets=["train.steps=20", "checkpoint.resume=auto"])
check("warning: train.steps was 12 when step 6 was saved, now 20" in out, "cosine extended: a warning")

# The report page draws the LR of the extended wsd run, against step.
page = os.path.join(work, "ext.html")
rep, _, _ = ws.tetra_cmd("report", ext, "--html", page)
with open(page) as f:
    html = f.read()
check('id="lr-step"' in html, "the page has the learning-rate chart")
print("PASS")
