#!/usr/bin/env python3
"""Resume checks what it resumes, and changes nothing on disk when it refuses:
  - a model change that keeps every parameter shape (model.n_heads, model.ln_eps) is an error (exit
    2) that names the keys, for checkpoint.resume: auto and by path; the checkpoints stay as they
    were (by path, the newer ones are not set aside as a rollback would);
  - a training file with other contents (the corpus fingerprint in meta.json differs) is an error
    that says so, unless checkpoint.allow_data_change: true, which warns and resumes;
  - checkpoint.keep keeps the newest N complete checkpoints and removes the others;
  - a resume under other optimizer settings (betas, eps, weight decay, min_lr) warns of each.

usage: resume_checks.py TETRA_BIN WORK_DIR"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import LICENCE_TEXTS, Workspace, check, checkpoint_steps, losses  # noqa: E402

EXIT_CONFIG = 2
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=8, every=2, keep=0)

# checkpoint.keep: 2 of the 4 checkpoints of an 8-step run remain, the newest.
ws.train("keep", sets=["checkpoint.keep=2"])
check(checkpoint_steps(ws.run_dir("keep")) == [6, 8], "checkpoint.keep 2: step_6 and step_8 remain of 2, 4, 6, 8")
ws.train("keep_all", sets=["checkpoint.keep=0", "train.steps=6"])
check(checkpoint_steps(ws.run_dir("keep_all")) == [2, 4, 6], "checkpoint.keep 0: every checkpoint remains")

# A run to resume: checkpoints 2, 4, 6 of an 8-step run (stopped by train.steps).
ws.train("base", sets=["train.steps=6"])
base = ws.run_dir("base")
ck = os.path.join(base, "checkpoints")


def listing():
    return sorted(os.listdir(ck))


before = listing()

# The same shapes, another model: heads (32 channels in 4 heads instead of 2) and LayerNorm epsilon.
_, err, _ = ws.train("base", sets=["checkpoint.resume=auto", "model.n_heads=4", "model.ln_eps=1e-6"],
                     expect=EXIT_CONFIG)
print(err[-1500:])
check("model.n_heads 2 then, 4 now" in err and "model.ln_eps" in err, "auto: the error names both model keys")
check(listing() == before, "auto: nothing in checkpoints/ was renamed or removed")
# By path into the same run (Workspace.train would start that run afresh).
r = subprocess.run(ws.command("base", 2, [f"checkpoint.resume={ck}/step_2", "model.n_heads=4"]), env=ws.env,
                   capture_output=True, text=True, timeout=120)
err = r.stderr
check(r.returncode == EXIT_CONFIG, f"by path: exit {r.returncode}")
check("model.n_heads 2 then, 4 now" in err, "by path: the error names model.n_heads")
check(listing() == before, "by path: step_4 and step_6 were not set aside (the resume was refused first)")

# Other training data: the same file name and config, other contents.
other = os.path.join(work, "other", "train.h5")
if not os.path.exists(other):
    os.makedirs(os.path.dirname(other), exist_ok=True)
    subprocess.run([tetra, "data", "prepare", "--tokenizer", "byte", "--out", other, "--input",
                    LICENCE_TEXTS[0]], check=True, env=ws.env, stdout=subprocess.DEVNULL)
_, err, _ = ws.train("base", sets=["checkpoint.resume=auto", f"data.train={other}"], expect=EXIT_CONFIG)
check("training data changed since step 6" in err and "fingerprint" in err and "allow_data_change" in err,
      "changed data: an error that names the fingerprint and checkpoint.allow_data_change")
check(listing() == before, "changed data: nothing was renamed")
out, _, _ = ws.train("base", sets=["checkpoint.resume=auto", f"data.train={other}", "checkpoint.allow_data_change=true",
                                   "train.steps=8"])
check("warning: the training data changed since step 6" in out and "resumed from" in out,
      "checkpoint.allow_data_change: true warns and resumes")
check(sorted(losses(base)) == list(range(1, 9)) and checkpoint_steps(base) == [2, 4, 6, 8],
      "the resumed run trained on to step 8")

# The unchanged config resumes as before (the checks do not reject a good resume).
ws.train("again", sets=["train.steps=6"])
out, _, _ = ws.train("again", sets=["checkpoint.resume=auto", "train.steps=6"])
warnings = [line for line in out.splitlines() if line.startswith("tetra: warning")]
print("\n".join(warnings))
check("resumed from" in out and not warnings, "an unchanged config resumes without a warning")

# Every optimizer setting that changed since the checkpoint is warned of, each by its key.
out, _, _ = ws.train("again", sets=["checkpoint.resume=auto", "train.steps=6", "optimizer.betas=[0.8, 0.99]",
                                    "optimizer.eps=1.0e-6", "optimizer.weight_decay=0.01", "optimizer.min_lr=0.0"])
warned = {line.split()[2] for line in out.splitlines() if line.startswith("tetra: warning:")}
print(sorted(warned))
check(warned == {"optimizer.betas", "optimizer.eps", "optimizer.weight_decay", "optimizer.min_lr"},
      "changed betas, eps, weight decay and min_lr: one warning each, nothing else")
check("optimizer.betas was [0.9, 0.95] when step 6 was saved, now [0.8, 0.99]" in out,
      "the betas warning gives the old and new values")
print("PASS")
