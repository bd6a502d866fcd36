#!/usr/bin/env python3
"""Errors that only one rank sees end the whole job promptly, with the error named, and no rank is
left waiting in a collective (launch/job/rank_agreement.h):
  - rank 0 cannot create the run directory (run.output_dir under a regular file);
  - a config error only rank 1 sees (its data.train is missing: an MPMD launch stands for a file
    that one node does not have);
  - rank 0 cannot open its ledger at start-up (goodput.jsonl is a directory);
  - rank 1's checkpoint write fails as on a full disk (TETRA_FAULT save_error);
  - rank 0's metrics.jsonl is on a full disk (a link to /dev/full): its first write, in the
    middle of training, fails while rank 1 waits in a collective, and the job is aborted.
The set-up errors and the failed checkpoint are agreed on: every rank exits by itself with the same
code — checked with mpirun told not to kill the job when one rank exits non-zero, each rank's exit
status written by a shell around it — and rank 0 prints the failing rank's message.

usage: rank_errors.py TETRA_BIN WORK_DIR"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import MPIRUN, Workspace, check, checkpoint_steps, ledger  # noqa: E402

EXIT_CONFIG, EXIT_ERROR = 2, 1
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=8, every=4)


def per_rank(name, rank_sets, fault=None, timeout=60):
    """Runs one rank per entry of rank_sets (its own --set list) under mpirun that does not kill
    the job when a rank exits non-zero; returns ({rank: exit status}, stderr, seconds)."""
    exits = os.path.join(work, f"{name}.exits")
    if os.path.exists(exits):
        os.remove(exits)
    cmd = MPIRUN + ["--mca", "orte_abort_on_non_zero_status", "0"]
    for i, sets in enumerate(rank_sets):
        args = " ".join(f"--set '{s}'" for s in [f"run.name={name}"] + sets)
        if i:
            cmd.append(":")
        cmd += ["-np", "1", "sh", "-c", f"'{tetra}' train '{ws.cfg}' {args}; echo $OMPI_COMM_WORLD_RANK $? >> '{exits}'"]
    env = dict(ws.env)
    if fault:
        env["TETRA_FAULT"] = fault
    t0 = time.time()
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        check(False, f"{name}: every rank exits by itself (the job was still running after {timeout} s)")
    took = time.time() - t0
    codes = {}
    if os.path.exists(exits):
        for line in open(exits):
            rank, code = line.split()
            codes[int(rank)] = int(code)
    print(f"{name}: exits {codes} in {took:.1f} s\n{r.stderr[-2000:]}", flush=True)
    return codes, r.stderr, took


# Rank 0 cannot create RUN_DIR: a path below a regular file (permissions do not stop root).
blocker = os.path.join(work, "a_file")
open(blocker, "w").close()
def timed_out(err):
    """Whether a rank left by run.comm_timeout_s (60 s here) rather than by the ranks' agreement: the
    test's meaning of "promptly", an event in the output rather than a duration a busy machine
    stretches (a job that hangs outright is stopped by the runs' own subprocess timeouts)."""
    return "did not complete within" in err


codes, err, took = per_rank("no_dir", [[f"run.output_dir={blocker}/runs"]] * 2)
check(codes == {0: EXIT_CONFIG, 1: EXIT_CONFIG} and not timed_out(err),
      f"unwritable run.output_dir: both ranks exit {EXIT_CONFIG} by themselves ({took:.1f} s)")
check(f"{blocker}/runs/no_dir" in err and "run.output_dir" in err and "Not a directory" in err,
      "the error names run.output_dir, the path and why")
check(err.count("tetra: error") == 1, "one rank (rank 0) prints the error, once")

# A config error that only rank 1 sees.
missing = os.path.join(work, "missing.h5")
codes, err, took = per_rank("rank1_config", [[], [f"data.train={missing}"]])
check(codes == {0: EXIT_CONFIG, 1: EXIT_CONFIG} and not timed_out(err),
      f"a config error of rank 1 alone: both ranks exit {EXIT_CONFIG} ({took:.1f} s)")
check("(rank 1)" in err and "data.train" in err and missing in err, "rank 0 prints rank 1's error, naming data.train")

# Rank 0 cannot open its ledger at start-up (goodput.jsonl is a directory).
run = ws.run_dir("bad_ledger")
shutil.rmtree(run, ignore_errors=True)
os.makedirs(os.path.join(run, "goodput.jsonl"))
codes, err, took = per_rank("bad_ledger", [["checkpoint.resume=auto"]] * 2)
check(codes == {0: EXIT_ERROR, 1: EXIT_ERROR} and not timed_out(err),
      f"rank 0 cannot open the ledger at start-up: both ranks exit {EXIT_ERROR} ({took:.1f} s)")
check("goodput.jsonl" in err and "Is a directory" in err, "the error names the ledger and why")

# Rank 1's checkpoint write fails (a full disk): agreed at the commit, every rank stops cleanly.
codes, err, took = per_rank("save_error", [[]] * 2, fault="save_error@4:rank=1")
check(codes == {0: EXIT_ERROR, 1: EXIT_ERROR} and not timed_out(err),
      f"rank 1's checkpoint write fails: both ranks exit {EXIT_ERROR} ({took:.1f} s)")
check("checkpoint step_4: rank(s) 1 could not write their file" in err and "No space left on device" in err,
      "the error names the checkpoint, the rank and its reason")
run = ws.run_dir("save_error")
check(checkpoint_steps(run) == [] and os.listdir(os.path.join(run, "checkpoints")) == [],
      "step_4 was never committed, and rank 0 removed the incomplete step_4.tmp")
ends = [(e["reason"], e["exit_code"]) for e in ledger(run) if e["event"] == "attempt_end"]
check(ends == [("error", EXIT_ERROR)], "rank 0 recorded attempt_end error (1)")

# Rank 0's metrics.jsonl fills up after start-up: an error of rank 0 alone in the middle of training,
# while rank 1 waits in the step's collective; the job is aborted at once.
run = ws.run_dir("full_metrics")
shutil.rmtree(run, ignore_errors=True)
os.makedirs(run)
os.symlink("/dev/full", os.path.join(run, "metrics.jsonl"))
t0 = time.time()
out, err, rc = ws.train("full_metrics", sets=["checkpoint.resume=auto"], expect=None, timeout=60)
took = time.time() - t0
print(err[-2000:])
check(rc == EXIT_ERROR and not timed_out(err), f"rank 0's metrics on a full disk mid-run: the job ends, exit {rc}, not by the collective timeout ({took:.1f} s)")
check("metrics.jsonl" in err and "No space left on device" in err, "the error names metrics.jsonl and the full disk")
ends = [(e["reason"], e["exit_code"]) for e in ledger(run) if e["event"] == "attempt_end"]
check(ends == [("error", EXIT_ERROR)], "rank 0 closed the ledger: attempt_end error (1)")
print("PASS")
