#!/usr/bin/env python3
"""A rank stopped inside a step on two GPUs (TETRA_FAULT stop_in_step: SIGSTOP at the start of step
4 on rank 1, after step 3's agreement): rank 0 issues step 4's gradient all-reduce and waits in
NCCL for a peer that never comes. Within run.comm_timeout_s (plus the grace period that names the
missing rank) the job ends with exit 4; the error names the step, the collective that did not
complete and its group, rank 1 is named with its pid as the unresponsive peer, rank 0 closed the
ledger (attempt_end error 4), and no process is left behind. Exits 77 (skipped) with fewer than
2 GPUs. The same drill runs on CPU ranks in tests/launch/job/hung_rank.py.

usage: hung_nccl.py TETRA_BIN WORK_DIR"""
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from script_util import require_gpus  # noqa: E402
from tetra_runs import Workspace, check, ledger  # noqa: E402

EXIT_COMM_TIMEOUT = 4
TIMEOUT_S = 10
tetra, work = sys.argv[1], sys.argv[2]
require_gpus(2)
ws = Workspace(tetra, work, steps=50, every=0)
sets = ["train.device=cuda", "train.precision=bf16", f"run.comm_timeout_s={TIMEOUT_S}"]
t0 = time.time()
out, err, rc = ws.train("hang", 2, sets=sets, fault="stop_in_step@4:rank=1", expect=None, timeout=180)
took = time.time() - t0
print(err[-3000:])
check(rc == EXIT_COMM_TIMEOUT, f"exit {rc} (want {EXIT_COMM_TIMEOUT}, a communication timeout)")
check(took < TIMEOUT_S + 15 + 30, f"the job ended {took:.1f} s after its start (timeout {TIMEOUT_S} s)")
check(re.search(r"step 4 did not finish on cuda:\d within run.comm_timeout_s", err) is not None,
      "rank 0's error names the step that did not finish")
check(re.search(r"(all_reduce|reduce_scatter|all_gather)[^\n]* on group \S+ \(rank 0 of 2", err) is not None,
      "the error names the collective that did not complete and its group")
m = re.search(r"rank (\d+) \(pid (\d+) on [^)]+\) did not reach the timeout", err)
check(m is not None and int(m.group(1)) == 1, "rank 1 is named as the unresponsive peer")
pid = int(m.group(2))
gone = False
for _ in range(100):
    if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
        gone = True
        break
    time.sleep(0.1)
if not gone:  # do not leave a stopped process behind, even when failing
    os.kill(pid, 9)
check(gone, f"the stopped rank (pid {pid}) was killed with the job")
ends = [e for e in ledger(ws.run_dir("hang")) if e["event"] == "attempt_end"]
check(ends and ends[-1]["reason"] == "error" and ends[-1]["exit_code"] == EXIT_COMM_TIMEOUT,
      f"rank 0 recorded attempt_end error ({EXIT_COMM_TIMEOUT})")
print("PASS")
