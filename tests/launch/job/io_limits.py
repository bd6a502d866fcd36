#!/usr/bin/env python3
"""I/O limits end a run cleanly:
  - a file-size limit (ulimit -f) below a checkpoint's rank file: the write fails with EFBIG
    instead of SIGXFSZ killing the process; the job ends with exit 1 and an error naming the file,
    its ledger ends with the attempt's end (exit code 1), and nothing crashes in HDF5's shutdown
    after the failed write — alone, and with ZeRO-1 on 4 ranks, where every rank's write fails;
  - what the failed save wrote (step_N.tmp) is removed, and so is any step_*.tmp an earlier failed
    or killed save left, before the next save writes.
The limit is set by a shell around each rank, after mpirun (whose PMIx server writes files larger
than the limit); the ranks talk over TCP (Open MPI's shared-memory transport backs its segments
with files larger than the limit).

usage: io_limits.py TETRA_BIN WORK_DIR"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import MPIRUN, Workspace, check, ledger  # noqa: E402

EXIT_ERROR = 1
LIMIT_BLOCKS = 200  # ulimit -f: a few 100 kB; a rank file of this model is larger, the logs stay smaller
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=8, every=4)

for name, np_, sets in (("alone", 1, ["parallel.dp=1"]), ("zero1", 4, ["parallel.zero_stage=1"])):
    run = ws.run_dir(name)
    shutil.rmtree(run, ignore_errors=True)
    # What an earlier failed save left, with a file that alone would exceed the limit again.
    leftover = os.path.join(run, "checkpoints", "step_50.tmp")
    os.makedirs(leftover)
    with open(os.path.join(leftover, "rank_00000.h5"), "wb") as f:
        f.write(b"\0" * 300_000)
    cmd = MPIRUN + ["--mca", "btl", "self,tcp", "-np", str(np_), "sh", "-c",
                    f'ulimit -f {LIMIT_BLOCKS} && exec "$0" "$@"'] + ws.command(name, sets=sets, mpirun=False)
    r = subprocess.run(cmd, env=ws.env, capture_output=True, text=True, timeout=120)
    print(r.stdout[-1500:], r.stderr[-3000:])
    check(r.returncode == EXIT_ERROR, f"{name}: a checkpoint over the file-size limit ends the job with exit 1 "
                                      f"(got {r.returncode})")
    check("signal" not in r.stderr and "Segmentation" not in r.stderr,
          f"{name}: no rank died by a signal (SIGXFSZ, or a crash at exit)")
    check("checkpoint step_4" in r.stderr and "File too large" in r.stderr,
          f"{name}: the error names the checkpoint and the file-size limit")
    ends = [e for e in ledger(run) if e["event"] == "attempt_end"]
    check(len(ends) == 1 and ends[0]["exit_code"] == EXIT_ERROR, f"{name}: the ledger records the attempt's end")
    left = sorted(os.listdir(os.path.join(run, "checkpoints")))
    check(left == [], f"{name}: neither the earlier leftover nor the failed save's step_4.tmp remains ({left})")
print("PASS")
