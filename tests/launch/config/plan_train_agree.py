#!/usr/bin/env python3
"""`tetra plan CONFIG --world N`, `tetra train CONFIG --dry-run --world N` and `tetra train CONFIG`
on N ranks accept and refuse the same configs: every check that depends on the config and the
world size alone is config validation (launch/config/validate.cpp), which all call. For each bad
config of the table below, all three exit 2 (exit_code::kConfig) with the same message, before any
work (no run directory is made).

usage: plan_train_agree.py TETRA_BIN WORK_DIR"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import MPIRUN, Workspace, check  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=2, every=0)
# The workspace's config runs on the CPU; where a check concerns GPU-only settings, the device is
# left to auto so that the check itself, not "needs a GPU", is what refuses the config.
gpu_keys = ["train.device=auto", "train.precision=auto"]

# (name, world, --set overrides, what the message says)
cases = [
    # What the training step cannot combine (these three were checked only as `tetra train` set up).
    ("cuda graphs under a pipeline", 2, gpu_keys + ["parallel.pp=2", "train.cuda_graphs=true"],
     "train.cuda_graphs: not supported with parallel.pp > 1"),
    ("copy-engine all-reduce under a pipeline", 2, gpu_keys + ["parallel.pp=2", "parallel.grad_all_reduce=copy_engine"],
     "parallel.grad_all_reduce: copy_engine is not supported with parallel.pp > 1"),
    ("cuda graphs under ZeRO-3", 2, gpu_keys + ["parallel.zero_stage=3", "train.cuda_graphs=true"],
     "train.cuda_graphs: not supported with parallel.zero_stage 3"),
    # The mesh, the model against the mesh, batches, schedules, the optimizer, the device.
    ("tp·pp does not divide the world", 2, ["parallel.tp=3"], "does not divide the 2 ranks of the job"),
    ("heads do not split over tp", 2, ["parallel.tp=2", "model.n_heads=1"], "model.n_heads"),
    ("batch does not split", 2, ["train.global_batch=6"], "do not split into micro-batches"),
    ("dualpipe on an odd pp", 3, ["parallel.pp=3", "parallel.schedule=dualpipe", "model.n_layers=3"], "even pp"),
    ("warmup beyond the run", 1, ["optimizer.warmup_steps=5"], "optimizer.warmup_steps: 5 exceeds train.steps = 2"),
    ("bf16 on the CPU", 1, ["train.precision=bf16"], "the CPU backend computes in fp32"),
    ("an invalid choice", 1, ["train.on_nonfinite=halt"], "halt is not a valid choice (one of: skip, stop)"),
    ("an unknown key", 1, ["train.stepz=3"], "did you mean train.steps?"),
]


def message(stderr):
    """The error line's message, without the rank that printed it."""
    lines = [l for l in stderr.splitlines() if l.startswith("tetra: error")]
    check(len(lines) >= 1, "an error line is printed")
    return re.sub(r"^tetra: error( \(rank \d+\))?: ", "", lines[0])


for name, world, sets, says in cases:
    args = [a for s in sets for a in ("--set", s)]
    plan = subprocess.run([tetra, "plan", ws.cfg, "--world", str(world)] + args, env=ws.env, capture_output=True,
                          text=True, timeout=120)
    run_name = "agree_" + re.sub(r"\W+", "_", name)
    cmd = [tetra, "train", ws.cfg, "--set", f"run.name={run_name}"] + args
    train = subprocess.run((MPIRUN + ["-np", str(world)] + cmd) if world > 1 else cmd, env=ws.env,
                           capture_output=True, text=True, timeout=120)
    dry = subprocess.run([tetra, "train", ws.cfg, "--dry-run", "--world", str(world)] + args, env=ws.env,
                         capture_output=True, text=True, timeout=120)
    check(dry.returncode == 2, f"{name}: tetra train --dry-run --world {world} refuses it with exit code 2")
    check(message(dry.stderr) == message(train.stderr), f"{name}: --dry-run says what train says")
    print(f"{name}: plan -> {plan.returncode}, train on {world} -> {train.returncode}", flush=True)
    if plan.returncode != 2 or train.returncode != 2:
        print(plan.stdout[-2000:], plan.stderr[-2000:], train.stdout[-2000:], train.stderr[-2000:])
    check(plan.returncode == 2, f"{name}: tetra plan --world {world} refuses it with exit code 2")
    check(train.returncode == 2, f"{name}: tetra train on {world} rank(s) refuses it with exit code 2")
    plan_says, train_says = message(plan.stderr), message(train.stderr)
    print(f"  {plan_says}")
    check(plan_says == train_says, f"{name}: the same message from both (train: {train_says})")
    check(says in plan_says, f"{name}: the message says {says!r}")
    check(not os.path.exists(ws.run_dir(run_name)), f"{name}: refused before the run directory was made")
print("PASS")
