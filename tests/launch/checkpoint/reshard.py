#!/usr/bin/env python3
"""A checkpoint written at one data-parallel size and ZeRO stage loads at another: save at dp=2,
resume at dp=4, save there, resume at dp=2 again. The resumed runs' losses follow the
uninterrupted dp=2 run within 1e-5 (relative; the reduction order differs with dp), and the final
master weights agree closely.

usage: reshard.py TETRA_BIN WORK_DIR [--save-stage S] [--load-stage S]
   (the dp=2 runs use --save-stage, the dp=4 run --load-stage; both default to 0)"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, losses, state_of  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("tetra")
ap.add_argument("work")
ap.add_argument("--save-stage", type=int, default=0)
ap.add_argument("--load-stage", type=int, default=0)
a = ap.parse_args()
ws = Workspace(a.tetra, a.work, steps=12, every=4)
s2, s4 = f"parallel.zero_stage={a.save_stage}", f"parallel.zero_stage={a.load_stage}"


def close_losses(run, first, last, what):
    ref, got = losses(ws.run_dir("dp2")), losses(ws.run_dir(run))
    worst = max(abs(got[s] - ref[s]) / abs(ref[s]) for s in range(first, last + 1))
    check(sorted(got) == list(range(first, last + 1)) and worst <= 1e-5,
          f"{what}: losses of steps {first}..{last} within 1e-5 of the uninterrupted run (worst {worst:.1e})")


ws.train("dp2", 2, [s2])
out, _, _ = ws.train("dp4", 4, [s4, "checkpoint.every=2",
                                f"checkpoint.resume={ws.run_dir('dp2')}/checkpoints/step_4"])
check(f"written at dp 2 tp 1 pp 1 ZeRO-{a.save_stage}, resharded to dp 4 tp 1 pp 1 ZeRO-{a.load_stage}" in out,
      "the dp=4 run says it resharded the dp=2 checkpoint")
close_losses("dp4", 5, 12, f"dp 2 ZeRO-{a.save_stage} -> dp 4 ZeRO-{a.load_stage}")

out, _, _ = ws.train("back", 2, [s2, f"checkpoint.resume={ws.run_dir('dp4')}/checkpoints/step_8"])
check(f"written at dp 4 tp 1 pp 1 ZeRO-{a.load_stage}, resharded to dp 2" in out, "and back to dp=2")
close_losses("back", 9, 12, f"dp 4 ZeRO-{a.load_stage} -> dp 2 ZeRO-{a.save_stage}")

_, ref = state_of(os.path.join(ws.run_dir("dp2"), "checkpoints", "step_12"))
meta, got = state_of(os.path.join(ws.run_dir("back"), "checkpoints", "step_12"))
check(all(not np.isnan(got[n]["master"]).any() for n in got), "the final checkpoint covers every parameter")
worst = max(float(np.max(np.abs(got[n]["master"] - ref[n]["master"]))) for n in ref)
check(worst < 1e-4, f"final master weights within 1e-4 of the uninterrupted run (worst {worst:.1e})")
print("PASS")
