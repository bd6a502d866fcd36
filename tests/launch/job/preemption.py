#!/usr/bin/env python3
"""Graceful stops. SIGTERM or SIGUSR1 reaching any rank makes every rank finish the same step,
write a checkpoint (also with checkpoint.async: true), record attempt_end "preempted" and exit 75,
the code that asks the scheduler to requeue; the resumed run then continues exactly as if never
stopped. A lone process (no mpirun) stopped by a real SIGTERM from outside does the same, and
SIGINT stops it with exit 130 and reason "interrupted".

usage: preemption.py TETRA_BIN WORK_DIR"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, checkpoint_steps, compare_states, ledger, losses, metrics  # noqa: E402

EXIT_PREEMPTED, EXIT_INTERRUPTED = 75, 130
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=12, every=4)
ws.train("base")
base = ws.run_dir("base")


def ends(run_dir):
    return [(e["attempt"], e["reason"], e["exit_code"]) for e in ledger(run_dir) if e["event"] == "attempt_end"]


# SIGTERM on rank 1 after step 5 (async writes), then SIGUSR1 on rank 0 after step 9 of the resumed run.
out, _, _ = ws.train("pre", sets=["checkpoint.async=true"], fault="term@5:rank=1", expect=EXIT_PREEMPTED)
pre = ws.run_dir("pre")
check("SIGTERM received: stopped after step 5 on every rank" in out, "SIGTERM: every rank stopped after step 5")
check(checkpoint_steps(pre) == [4, 5], "SIGTERM: step_5 was written before the exit")
check(max(metrics(pre)) == 5, "SIGTERM: no step after 5 was trained")
out, _, _ = ws.train("pre", sets=["checkpoint.async=true", "checkpoint.resume=auto"], fault="usr1@9:rank=0",
                     expect=EXIT_PREEMPTED)
check("resumed from" in out and "step_5" in out and "SIGUSR1 received: stopped after step 9" in out,
      "SIGUSR1: the resumed run went from step 5 to step 9 and stopped")
ws.train("pre", sets=["checkpoint.async=true", "checkpoint.resume=auto"])
check(ends(pre) == [(1, "preempted", 75), (2, "preempted", 75), (3, "finished", 0)],
      "ledger: attempts ended preempted (75), preempted (75), finished (0)")
check(losses(pre) == losses(base), "losses equal the uninterrupted run's exactly")
worst, _ = compare_states(os.path.join(base, "checkpoints", "step_12"), os.path.join(pre, "checkpoints", "step_12"))
check(worst == 0.0, "the final state equals the uninterrupted run's bit for bit")
rep, _, _ = ws.tetra_cmd("report", pre)
check("0 lost to failures" in rep and "2 restarts" in rep, "report: 2 restarts, no step lost")

# A lone process, and real signals from outside at whatever step they land.
for sig, code, reason in ((signal.SIGTERM, EXIT_PREEMPTED, "preempted"), (signal.SIGINT, EXIT_INTERRUPTED, "interrupted")):
    name = f"lone_{sig.name.lower()}"
    run = ws.run_dir(name)
    shutil.rmtree(run, ignore_errors=True)  # its metrics.jsonl must be this process's
    p = subprocess.Popen(ws.command(name, sets=["parallel.dp=1", "train.steps=2000", "checkpoint.every=0"], mpirun=False),
                         env=ws.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.exists(os.path.join(run, "metrics.jsonl")) and
                                          sum(1 for _ in open(os.path.join(run, "metrics.jsonl"))) >= 3):
        time.sleep(0.02)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    check(p.returncode == code, f"{sig.name} to a lone process: exit {p.returncode} (want {code})")
    last = max(metrics(run))
    check(last < 2000 and checkpoint_steps(run) == [last],
          f"{sig.name}: stopped after step {last} and saved step_{last} (checkpoint.every is 0)")
    check(ends(run) == [(1, reason, code)], f"{sig.name}: attempt_end {reason} ({code})")
print("PASS")
