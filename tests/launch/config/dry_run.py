#!/usr/bin/env python3
"""`tetra train CONFIG --dry-run`: resolves, validates and plans the config, prints the resolved
config and the plan, exits 0, and starts and writes nothing.
  - alone: 1 rank, or --world N; the printed config is RUN_DIR/config.yaml's text (it reads back
    the same: `tetra plan` accepts it), the plan is `tetra plan --world N`'s;
  - under mpirun -np 2: the launcher's 2 ranks, printed once; a different --world is a usage error;
  - a bad config, a missing data file or checkpoint.resume path: exit 2 with train's message;
  - --world without --dry-run is refused (exit 2).

usage: dry_run.py TETRA_BIN WORK_DIR"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import MPIRUN, Workspace, check  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=4, every=2)


def dry(*args, np_=0, name="dry"):
    cmd = [tetra, "train", ws.cfg, "--dry-run", "--set", f"run.name={name}"] + list(args)
    r = subprocess.run((MPIRUN + ["-np", str(np_)] + cmd) if np_ else cmd, env=ws.env, capture_output=True, text=True,
                       timeout=120)
    return r.stdout, r.stderr, r.returncode


out, err, rc = dry()
print(out[:1500])
check(rc == 0, f"a good config: exit 0 (got {rc}: {err[-500:]})")
check("tetra: dry run of " + ws.cfg + " at 1 rank (no launcher)" in out, "it says what it checked, at 1 rank")
check("# tetra experiment config, resolved" in out and "  steps: 4\n" in out, "it prints the resolved config")
check("mesh: world 1 = pp 1 × dp 1 × tp 1" in out and "model: " in out and "by zero_stage" in out,
      "it prints the plan: the mesh, the model, the memory")
check(not os.path.exists(ws.run_dir("dry")), "nothing was written (no run directory)")

# The printed config is the resolved one: it loads back, and plans as the original.
text = out[out.index("# tetra experiment config"):out.index("mesh: world")]
resolved = os.path.join(work, "resolved.yaml")
with open(resolved, "w") as f:
    f.write(text)
plan, _, _ = ws.tetra_cmd("plan", resolved, "--world", "1")
check(plan.strip() in out, "the plan printed is `tetra plan`'s, also of the printed config")

out, _, rc = dry("--world", "2", "--set", "parallel.dp=0")
check(rc == 0 and "at 2 ranks (--world)" in out and "mesh: world 2 = pp 1 × dp 2 × tp 1" in out,
      "--world 2: planned for 2 ranks, dp 2")

out, err, rc = dry(np_=2)
check(rc == 0, f"under mpirun -np 2: exit 0 (got {rc}: {err[-500:]})")
check(out.count("tetra: dry run of") == 1 and "at 2 ranks (mpirun)" in out, "under mpirun: the launcher's 2 ranks, once")
check("mesh: world 2 = pp 1 × dp 2 × tp 1" in out, "under mpirun: the mesh of 2 ranks")
_, err, rc = dry("--world", "3", np_=2)
check(rc == 2 and "--world 3 but the launcher (mpirun) started 2 ranks" in err,
      "under mpirun, another --world: exit 2 naming both")

# Refused as train refuses them (exit 2, the same message; plan_train_agree.py covers the table).
_, err, rc = dry("--set", "train.global_batch=6", "--world", "2")
check(rc == 2 and "do not split into micro-batches" in err, "a batch that does not split: exit 2")
_, err, rc = dry("--set", f"data.train={work}/missing.h5")
check(rc == 2 and "missing.h5" in err, "a missing training file: exit 2 naming it")
_, err, rc = dry("--set", f"checkpoint.resume={work}/nowhere/step_4")
check(rc == 2 and "nowhere" in err, "a missing checkpoint.resume path: exit 2 naming it")
r = subprocess.run([tetra, "train", ws.cfg, "--world", "2"], env=ws.env, capture_output=True, text=True, timeout=60)
check(r.returncode == 2 and "--world is read only with --dry-run" in r.stderr, "--world without --dry-run: exit 2")
print("PASS")
