#!/usr/bin/env python3
"""One run per run directory (RUN_DIR/run.lock, launch/job/run_lock.h), and the ranks that refuse
to start say why:
  - a second `tetra train` into the directory of a live run (a lone process held by SIGSTOP, so it
    is alive for as long as the test needs) exits 2 at once, on every rank of an mpirun job,
    naming the directory, the holder's host, pid and start time and what to do; the live run's
    files stay where they are and it finishes normally afterwards, with one attempt in its ledger;
  - a lock left by a killed run on this host is taken over at once (its pid is gone);
  - a lock of a job on another host (another boot id) is judged by its heartbeat: one untouched
    for longer than the lease is taken over, one touched while the second job watches it is a
    live job (exit 2 naming that host), one that expires while watched is taken over;
  - the attempts of those runs, back to back, are not reported as overlapping;
  - a fault plan naming a rank the job does not have is a usage error (exit 2);
  - an srun task without PMIx (SLURM_STEP_ID=0 SLURM_PROCID=1, no mpirun) says why it exits 2.

usage: run_dir_lock.py TETRA_BIN WORK_DIR"""
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, ledger  # noqa: E402

EXIT_CONFIG = 2
LEASE_S = 30  # RunLock::kLeaseS
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=4, every=2)
run = ws.run_dir("held")
lock = os.path.join(run, "run.lock")


def wait_stopped(p):
    """Until process p is stopped (state T in /proc/PID/stat): it holds the lock then. A process
    that ends instead fails the test with its output."""
    while True:
        with open(f"/proc/{p.pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state in ("T", "t"):
            return
        if p.poll() is not None:
            out, err = p.communicate()
            print(out[-3000:], err[-3000:])
            check(False, f"the run to hold the directory stopped itself after step 2 (it exited {p.returncode})")
        time.sleep(0.05)


def start_held(sets=()):
    """A lone run that stops itself (SIGSTOP) after step 2, holding its run directory."""
    shutil.rmtree(run, ignore_errors=True)
    env = dict(ws.env, TETRA_FAULT="stop@2")
    p = subprocess.Popen(ws.command("held", sets=["parallel.dp=1"] + list(sets), mpirun=False), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_stopped(p)
    return p


# A live run holds the directory: a second job (2 ranks, a fresh start) is refused, every rank exits.
held = start_held()
before = sorted(os.listdir(run))
r = subprocess.run(ws.command("held", np_=2, sets=["checkpoint.resume=none"]), env=ws.env, capture_output=True,
                   text=True, timeout=120)
print(r.stderr[-1500:])
check(r.returncode == EXIT_CONFIG, f"a second job into a live run's directory exits {EXIT_CONFIG} (got {r.returncode})")
check(f"the run directory {run} is in use by a running job" in r.stderr and f"pid {held.pid}" in r.stderr
      and f"host {os.uname().nodename}" in r.stderr and "started 20" in r.stderr,
      "the refusal names the directory, the holder's host, pid and start time")
check("SIGTERM to pid" in r.stderr and "run.name" in r.stderr, "the refusal says how to proceed")
check(sorted(os.listdir(run)) == before and not os.path.exists(os.path.join(run, "previous")),
      "the live run's files were not moved")
r = subprocess.run(ws.command("held", np_=2, sets=["checkpoint.resume=auto"]), env=ws.env, capture_output=True,
                   text=True, timeout=120)
check(r.returncode == EXIT_CONFIG and "in use by a running job" in r.stderr, "a resume into it is refused too")
held.send_signal(signal.SIGCONT)
out, err = held.communicate(timeout=120)
check(held.returncode == 0, f"the live run then finishes normally (exit {held.returncode})")
check([e["attempt"] for e in ledger(run) if e["event"] == "attempt_start"] == [1],
      "its ledger holds its own attempt only")
check(not os.path.exists(lock), "a run that ends removes its lock")

# A killed run's lock (same host): taken over at once.
held = start_held()
held.kill()
held.wait()
check(os.path.exists(lock), "a killed run leaves its lock behind")
out, _, _ = ws.train("held", sets=["checkpoint.resume=auto"])
check("took over" in out and "no longer exists" in out, "a run on the same host takes over a dead process's lock")
check(not os.path.exists(lock), "and removes it when it ends")


def foreign_lock(age_s):
    """A lock of a job on another host (another kernel boot), last touched age_s seconds ago."""
    with open(lock, "w") as f:
        f.write("host=othernode\npid=4242\nstart=2026-01-01 00:00:00.000 UTC\nstart_unix=1767225600\n"
                "start_ticks=1\nboot_id=00000000-0000-0000-0000-000000000000\npid_ns=pid:[1]\n")
    t = time.time() - age_s
    os.utime(lock, (t, t))


# Another host's lock whose heartbeat stopped longer ago than the lease: taken over at once.
foreign_lock(LEASE_S + 60)
out, _, _ = ws.train("held", sets=["checkpoint.resume=auto"])
check("took over" in out and "othernode" in out and "heartbeat stopped" in out,
      "another host's lock with a stopped heartbeat is taken over")

# Another host's lock that is being renewed: a live job there, refused.
foreign_lock(0)
stop = threading.Event()


def renew():
    while not stop.wait(0.5):
        os.utime(lock)


renewer = threading.Thread(target=renew)
renewer.start()
_, err, _ = ws.train("held", sets=["checkpoint.resume=auto"], expect=EXIT_CONFIG)
stop.set()
renewer.join()
check("in use by a running job" in err and "host othernode, pid 4242" in err,
      "another host's lock whose heartbeat moves: refused, naming that host and pid")

# Another host's lock that expires while watched: taken over once the lease runs out.
foreign_lock(LEASE_S - 2)
out, _, _ = ws.train("held", sets=["checkpoint.resume=auto"])
check("waiting up to" in out and "took over" in out, "a lock whose lease runs out while watched is taken over")

# The attempts above ran back to back: none is reported as overlapping the one before (each
# attempt starts at its process's start, to the clock tick, not up to a second early).
rep, _, _ = ws.tetra_cmd("report", run)
check("overlap" not in rep, "back-to-back attempts are not reported as overlapping")

# A fault plan for a rank the job does not have.
_, err, _ = ws.train("fault_rank", np_=2, fault="kill@2:rank=5", expect=EXIT_CONFIG)
check("names rank 5" in err and "ranks 0 to 1" in err, "TETRA_FAULT naming rank 5 of 2 ranks: a usage error")

# An srun task without PMIx: the task that is not rank 0 says why too.
env = dict(ws.env, SLURM_STEP_ID="0", SLURM_PROCID="1", SLURM_NTASKS="2", SLURM_STEP_NUM_TASKS="2")
for k in ("PMIX_RANK", "OMPI_COMM_WORLD_RANK"):
    env.pop(k, None)
r = subprocess.run(ws.command("slurm", mpirun=False), env=env, capture_output=True, text=True, timeout=60)
print(r.stderr)
check(r.returncode == EXIT_CONFIG and "(task 1)" in r.stderr and "without PMIx" in r.stderr,
      "SLURM_PROCID=1 without PMIx: exit 2 with the reason on that task")
print("PASS")
