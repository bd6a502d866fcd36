#!/usr/bin/env python3
"""kill -9 one rank in the middle of a CPU run under mpirun, restart with checkpoint.resume: auto,
and get exactly the run that was never interrupted: the same losses and the same final weights
and optimizer state, bit for bit (fp32 on the CPU). The goodput report of the crashed-and-resumed
run counts the steps done after the last checkpoint as lost and shows the restart. A run with
checkpoint.async: true reproduces the synchronous one bit for bit too.

usage: kill_and_resume.py TETRA_BIN WORK_DIR [--set overrides of every run, e.g. another model family]"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, checkpoint_steps, compare_states, ledger, losses  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=12, every=4, base_sets=sys.argv[3:])

ws.train("base")
base_losses = losses(ws.run_dir("base"))
check(sorted(base_losses) == list(range(1, 13)), "the uninterrupted run trained steps 1..12")

# Rank 1 raises SIGKILL on itself right after step 7: mpirun tears the job down.
_, err, rc = ws.train("crash", fault="kill@7:rank=1", expect=None)
check(rc != 0, f"the killed job exits non-zero (mpirun: {rc})")
crash = ws.run_dir("crash")
check(checkpoint_steps(crash) == [4], "only step_4 was committed before the kill")
check(not any(n.endswith(".tmp") for n in os.listdir(os.path.join(crash, "checkpoints"))),
      "no half checkpoint was left (the kill came between saves)")
first = [e for e in ledger(crash) if e["attempt"] == 1]
check(not any(e["event"] == "attempt_end" for e in first), "the killed attempt left no attempt_end")
check(max(e["step"] for e in first if e["event"] == "step") == 7, "attempt 1 recorded steps up to 7")

out, _, _ = ws.train("crash", sets=["checkpoint.resume=auto"])
check("resumed from" in out and "step_4" in out, "attempt 2 says it resumed from step_4")
resumed = losses(crash)
check(resumed == base_losses, "every step's loss equals the uninterrupted run's exactly")
for step in (8, 12):
    worst, n = compare_states(os.path.join(ws.run_dir("base"), "checkpoints", f"step_{step}"),
                              os.path.join(crash, "checkpoints", f"step_{step}"))
    check(worst == 0.0, f"step_{step}: master, exp_avg, exp_avg_sq of all {n} parameters equal bit for bit")

# The report of the job: one restart, steps 5..7 lost, the load and the gap between attempts.
rep, _, _ = ws.tetra_cmd("report", crash)
print(rep)
with open(os.path.join(crash, "goodput.json")) as f:
    g = json.load(f)
check(g["restarts"] == 1 and g["finished"], "report: 1 restart, finished")
check(g["steps"]["lost"] == 3 and g["steps"]["kept"] == 12, "report: 3 steps lost (5, 6, 7), 12 kept")
check(g["tokens"]["lost"] == 3 * 8 * 32, "report: the lost steps' tokens")
a1, a2 = g["attempts"]
check(a1["end_reason"] is None and a1["last_step"] == 7, "report: attempt 1 crashed after step 7")
check(a2["restored_step"] == 4 and a2["end_reason"] == "finished" and a2["first_step"] == 5,
      "report: attempt 2 restored step 4 and ran 5..12")
check(g["seconds"]["lost_to_failures"] > 0 and g["seconds"]["idle"] > 0 and g["seconds"]["checkpoint_load"] > 0,
      "report: time lost to failures, idle between attempts, checkpoint load")
check("3 lost to failures" in rep and "1 restart" in rep, "tetra report prints the lost steps and the restart")

# The same run with background (async) writes: identical state, and the ledger has write times.
ws.train("async", sets=["checkpoint.async=true"])
worst, _ = compare_states(os.path.join(ws.run_dir("base"), "checkpoints", "step_12"),
                          os.path.join(ws.run_dir("async"), "checkpoints", "step_12"))
check(worst == 0.0, "checkpoint.async: true writes the same state bit for bit")
saves = [e for e in ledger(ws.run_dir("async")) if e["event"] == "ckpt_save" and "write_seconds" in e]
check(sorted(e["step"] for e in saves) == [4, 8, 12] and all(e["async"] for e in saves),
      "async saves record the blocking span and their write_seconds")
print("PASS")
