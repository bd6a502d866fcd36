#!/usr/bin/env python3
"""A rank that stops answering (SIGSTOP on itself after step 3): the other ranks' next collective
times out after run.comm_timeout_s, the error names the collective and its group, the rank that
never arrived is named with its pid and host, the job ends with exit 4 (by the timeout:
no wall-clock bound of the test's own), and no process is left behind (the stopped one included).

usage: hung_rank.py TETRA_BIN WORK_DIR"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, ledger  # noqa: E402

EXIT_COMM_TIMEOUT = 4
TIMEOUT_S = 3
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=50, every=0)

for np_, victim in ((2, 1), (4, 2)):
    name = f"hang{np_}"
    t0 = time.time()
    out, err, rc = ws.train(name, np_, sets=[f"run.comm_timeout_s={TIMEOUT_S}"], fault=f"stop@3:rank={victim}",
                            expect=None, timeout=90)
    took = time.time() - t0
    print(err[-3000:])
    check(rc == EXIT_COMM_TIMEOUT, f"np {np_}: exit {rc} (want {EXIT_COMM_TIMEOUT}, a communication timeout)")
    # No bound on `took`: exit 4 and the message below say the timeout ended the job; a job that
    # hangs is stopped by ws.train's 90 s subprocess timeout (a hang guard, not a duration measured).
    print(f"np {np_}: the job ended {took:.1f} s after its start")
    check(re.search(r"all_reduce on group world \(rank \d of %d\) did not complete within %d s" % (np_, TIMEOUT_S), err),
          f"np {np_}: the error names the collective and the group")
    m = re.search(r"rank (\d+) \(pid (\d+) on [^)]+\) did not reach the timeout", err)
    check(m is not None and int(m.group(1)) == victim, f"np {np_}: rank {victim} is named as the unresponsive peer")
    pid = int(m.group(2))
    gone = False
    for _ in range(100):
        if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
            gone = True
            break
        time.sleep(0.1)
    if not gone:  # do not leave a stopped process behind, even when failing
        os.kill(pid, 9)
    check(gone, f"np {np_}: the stopped rank (pid {pid}) was killed with the job")
    ends = [e for e in ledger(ws.run_dir(name)) if e["event"] == "attempt_end"]
    if victim != 0:
        check(ends and ends[-1]["reason"] == "error" and ends[-1]["exit_code"] == EXIT_COMM_TIMEOUT,
              f"np {np_}: rank 0 recorded attempt_end error ({EXIT_COMM_TIMEOUT})")

# Stopped inside a step (after the previous step's agreement): the peer times out in that step's
# gradient all-reduce, on the data-parallel group, and names it (tests/launch/train/hung_nccl.py is the
# same drill on two GPUs, where the wait is inside NCCL).
out, err, rc = ws.train("hang_in_step", 2, sets=[f"run.comm_timeout_s={TIMEOUT_S}"], fault="stop_in_step@4:rank=1",
                        expect=None, timeout=90)
print(err[-2000:])
check(rc == EXIT_COMM_TIMEOUT, f"stop_in_step: exit {rc}")
check(re.search(r"all_reduce on group dp\[0,1\] \(rank 0 of 2\) did not complete within %d s" % TIMEOUT_S, err),
      "stop_in_step: the error names the gradient all-reduce and the data-parallel group")
m = re.search(r"rank (\d+) \(pid (\d+) on [^)]+\) did not reach the timeout", err)
check(m is not None and int(m.group(1)) == 1, "stop_in_step: rank 1 is named as the unresponsive peer")
pid = int(m.group(2))
for _ in range(100):
    if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
        break
    time.sleep(0.1)
else:
    os.kill(pid, 9)
    check(False, "stop_in_step: the stopped rank was killed with the job")
print("PASS")
