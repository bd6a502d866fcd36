#!/usr/bin/env python3
"""tetra under a real SLURM: starts a one-node cluster on this machine (munged, slurmctld, slurmd
from Debian, configured by slurm_cluster.sh in WORK_DIR), then
  - srun --mpi=pmix -n 2 runs the tiny config; the run directory is complete and its losses equal
    those of the same run under mpirun, bit for bit;
  - srun -n 3 with parallel.dp: 2, and srun --mpi=none, fail with exit 2 and a message that says
    what to change;
  - scripts/slurm/train.sbatch (the documented batch script) runs as a job; SIGUSR1 (the time-limit
    warning) reaches one rank after step 5, tetra checkpoints and exits 75, the script requeues the
    job, and the requeued job resumes and finishes with the same losses;
and stops the daemons it started. Exits 77 (ctest SKIP_RETURN_CODE) only where no cluster can
run: not root, or the packages missing. As root with SLURM installed, daemons that do not come up
are a failure (exit 1) that prints why and where the logs are.

usage: slurm_test.py TETRA_BIN WORK_DIR"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, checkpoint_steps, fail, ledger, losses  # noqa: E402

SKIP = 77
tetra, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
if os.geteuid() != 0:
    print("SKIP: the SLURM test starts munged, slurmctld and slurmd as root; run the suite as root")
    sys.exit(SKIP)
missing = [b for b in ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scontrol", "squeue")
           if shutil.which(b) is None]
if missing:
    print(f"SKIP: {', '.join(missing)} not installed (scripts/setup.sh installs munge slurmctld slurmd slurm-client)")
    sys.exit(SKIP)

cluster = os.path.join(work, "cluster")
shutil.rmtree(cluster, ignore_errors=True)
start = subprocess.run([os.path.join(HERE, "slurm_cluster.sh"), "start", cluster], capture_output=True, text=True)
if start.returncode == SKIP:
    print("SKIP: " + start.stderr.strip())
    sys.exit(SKIP)
if start.returncode != 0:
    print(start.stdout, start.stderr)
    fail(f"the SLURM cluster did not come up (slurm_cluster.sh start exited {start.returncode}): "
         f"{start.stderr.strip().splitlines()[-1] if start.stderr.strip() else 'no message'}; logs in {cluster}/log")
conf = re.search(r"SLURM_CONF=(\S+)", start.stdout).group(1)
print(f"cluster up: {conf}", flush=True)


def slurm(*args, **kw):
    return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=kw.get("timeout", 60))


def job_field(job, field):
    out = slurm("scontrol", "show", "job", str(job)).stdout
    m = re.search(field + r"=(\S*)", out)
    return m.group(1) if m else ""


def stepd_alive(job):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f"[{job}.".encode() in f.read() and b"slurmstepd" in open(f"/proc/{pid}/comm", "rb").read():
                    return True
        except OSError:
            pass
    return False


try:
    ws = Workspace(tetra, os.path.join(work, "runs"), steps=12, every=4)
    env = dict(ws.env, SLURM_CONF=conf)

    # 1. srun with PMIx, against the same run under mpirun.
    ws.train("mpirun", 2)
    r = slurm("srun", "--immediate=30", "--mpi=pmix", "-n", "2", *ws.command("srun", mpirun=False), timeout=120)
    print(r.stdout[-1500:], r.stderr[-1500:])
    check(r.returncode == 0, f"srun --mpi=pmix -n 2 tetra train: exit {r.returncode}")
    run = ws.run_dir("srun")
    check("world 2 (dp 2 tp 1 pp 1)" in r.stdout and "| srun" in r.stdout, "tetra found 2 ranks launched by srun")
    check(checkpoint_steps(run) == [4, 8, 12] and all(os.path.exists(os.path.join(run, f))
          for f in ("config.yaml", "metrics.jsonl", "goodput.jsonl", "goodput.json")),
          "the run directory holds config, metrics, ledger, report and checkpoints 4, 8, 12")
    check(losses(run) == losses(ws.run_dir("mpirun")), "srun and mpirun runs have the same losses, bit for bit")

    # 2. What a wrong launch says.
    r = slurm("srun", "--immediate=30", "--mpi=pmix", "-n", "3", "--overcommit", *ws.command("three", sets=["parallel.dp=2"], mpirun=False))
    check(r.returncode == 2 and "dp·tp·pp = 2·1·1 = 2 but the job has 3 ranks" in r.stderr,
          "srun -n 3 with parallel.dp 2: exit 2, the mesh does not match the 3 ranks")
    r = slurm("srun", "--immediate=30", "--mpi=none", "-n", "2", *ws.command("nopmix", mpirun=False))
    check(r.returncode == 2 and "needs srun --mpi=pmix" in r.stderr, "srun --mpi=none: exit 2, asks for --mpi=pmix")

    # 3. The batch script, preempted by the time-limit warning, requeued, resumed.
    shutil.rmtree(ws.run_dir("batch"), ignore_errors=True)  # the script always resumes: start clean
    sbatch_out = os.path.join(work, "sbatch-%j.out")
    jenv = dict(env, TETRA=tetra, TETRA_FAULT="usr1@5:rank=1")
    r = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--gpus-per-task=0",
                        "--cpus-per-task=1", "--time=5", f"--output={sbatch_out}",
                        os.path.join(SOURCE, "scripts", "slurm", "train.sbatch"), ws.cfg, "--set", "run.name=batch"],
                       env=jenv, capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"sbatch train.sbatch: {r.stdout.strip()} {r.stderr.strip()}")
    job = r.stdout.strip().split(";")[0]
    released = False
    deadline = time.time() + 100
    state = ""
    while time.time() < deadline:
        state = job_field(job, "JobState")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            break
        # SLURM holds a requeued batch job back for about two minutes; let it go as soon as the
        # node has finished the first run's step.
        if not released and job_field(job, "Restarts") == "1" and state == "PENDING" and not stepd_alive(job):
            slurm("scontrol", "update", f"JobId={job}", "StartTime=now")
            released = True
        time.sleep(0.2)
    log = open(sbatch_out.replace("%j", job)).read()
    print(log[-2500:])
    check(state == "COMPLETED" and job_field(job, "ExitCode") == "0:0", f"job {job} completed (state {state})")
    check("preempted after a checkpoint (exit 75): requeueing" in log and "(restart 1)" in log,
          "the batch script requeued the job on exit 75 and it ran again")
    batch = ws.run_dir("batch")
    ends = [(e["attempt"], e["reason"], e["exit_code"]) for e in ledger(batch) if e["event"] == "attempt_end"]
    check(ends == [(1, "preempted", 75), (2, "finished", 0)], "ledger: attempt 1 preempted (75), attempt 2 finished")
    check(losses(batch) == losses(run), "the preempted and requeued job has the same losses as the plain srun run")
    with open(os.path.join(batch, "goodput.json")) as f:
        g = json.load(f)
    check(g["restarts"] == 1 and g["attempts"][1]["restored_step"] == 5, "report: 1 restart, resumed from step 5")
    print("PASS")
finally:
    subprocess.run(["scancel", "--full", "--user=root"], env=dict(os.environ, SLURM_CONF=conf),
                   capture_output=True, timeout=30)
    for _ in range(50):
        if not any(stepd_alive(j) for j in range(1, 100)):
            break
        time.sleep(0.1)
    subprocess.run([os.path.join(HERE, "slurm_cluster.sh"), "stop", cluster], timeout=60)
