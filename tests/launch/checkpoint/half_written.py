#!/usr/bin/env python3
"""checkpoint.resume: auto ignores every checkpoint that is not whole: a step_N.tmp left by a
killed writer, a step_N without meta.json, a rank file whose CRC-32 or size does not match
meta.json, a missing rank file, an unreadable meta.json, a meta.json with a field of the wrong type
or whose step is not the directory's. It resumes from the newest complete one,
continues exactly as the uninterrupted run, sets the broken directories aside and removes the
.tmp leftover. Resuming from a broken checkpoint by path is an error (exit 2) that says why.

usage: half_written.py TETRA_BIN WORK_DIR"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, checkpoint_steps, compare_states, losses  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=12, every=4)
ws.train("base")
base = ws.run_dir("base")
good = os.path.join(base, "checkpoints", "step_12")

# A run that got to step 4 and then met every kind of damage in later checkpoints.
half = ws.run_dir("half")
shutil.rmtree(half, ignore_errors=True)
shutil.copytree(base, half)
ck = os.path.join(half, "checkpoints")
shutil.rmtree(os.path.join(ck, "step_8"))
shutil.rmtree(os.path.join(ck, "step_12"))


def fake(step, as_step=True):
    """step_12's files as step_N; meta.json says step N unless as_step is False (a copy by hand)."""
    d = os.path.join(ck, f"step_{step}")
    shutil.copytree(good, d)
    if as_step:
        with open(os.path.join(d, "meta.json")) as f:
            m = json.load(f)
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(dict(m, step=step), f)
    return d


def truncate(path, keep):
    with open(path, "r+b") as f:
        f.truncate(keep)


d = fake(12)                                     # a killed writer: step_12.tmp, cut short, no meta.json
os.remove(os.path.join(d, "meta.json"))
truncate(os.path.join(d, "rank_00000.h5"), 4096)
os.rename(d, d + ".tmp")
os.remove(os.path.join(fake(11), "meta.json"))   # renamed by hand, or a copy cut short: no meta.json
d = fake(10)                                     # one flipped byte in the middle of rank 0's file
with open(os.path.join(d, "rank_00000.h5"), "r+b") as f:
    f.seek(os.path.getsize(os.path.join(d, "rank_00000.h5")) // 2)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x40]))
truncate(os.path.join(fake(9), "rank_00001.h5"), 1000)   # rank 1's file cut short (checked by rank 1)
with open(os.path.join(fake(13), "meta.json"), "w") as f:
    f.write('{"format": "tetra-checkpoint", "step": 13, ')   # meta.json cut short
os.remove(os.path.join(fake(14), "rank_00001.h5"))       # a rank file missing
with open(os.path.join(good, "meta.json")) as f:
    meta = dict(json.load(f), step=15)
wrong = dict(meta, files=[dict(meta["files"][0], bytes="many")] + meta["files"][1:])
with open(os.path.join(fake(15), "meta.json"), "w") as f:
    json.dump(wrong, f)                                   # a field of the wrong type
fake(16, as_step=False)                                  # step_12 copied to step_16 by hand
os.rename(fake(17), os.path.join(ck, "step_17x"))        # not a step_N name: never a candidate

# By path, a broken checkpoint is an error that says why (exit 2, before any step).
_, err, _ = ws.train("bypath", sets=[f"checkpoint.resume={ck}/step_10"], expect=2)
check("CRC-32" in err and "rank_00000.h5" in err, "resume by path refuses step_10 and names the damaged file")

out, _, _ = ws.train("half", sets=["checkpoint.resume=auto"])
print("\n".join(line for line in out.splitlines() if "ignoring" in line or "set " in line or "removed" in line))
for step, why in ((16, "after step 12"), (15, "wrong type"), (14, "rank_00001.h5 is missing"), (13, "not valid JSON"),
                  (11, "no meta.json"), (10, "CRC-32"), (9, "rank_00001.h5 has 1000 bytes")):
    check(f"ignoring {ck}/step_{step}: " in out and why in out.split(f"ignoring {ck}/step_{step}: ")[1].splitlines()[0],
          f"step_{step} ignored: {why}")
check("resumed from " + ck + "/step_4 " in out, "resumed from the newest whole checkpoint, step_4")
check(losses(half) == losses(base), "losses of steps 1..12 equal the uninterrupted run's exactly")
worst, _ = compare_states(good, os.path.join(ck, "step_12"))
check(worst == 0.0, "the final state equals the uninterrupted run's bit for bit")
names = sorted(os.listdir(ck))
check(all(f"step_{s}.discarded" in names for s in (9, 10, 11, 13, 14, 15, 16)), "the broken checkpoints were set aside")
check("step_17x" in names and "step_17x" not in out, "a directory not named step_N is left alone")
check("step_12.tmp" not in names and "removed " + ck + "/step_12.tmp" in out,
      "the leftover step_12.tmp was removed at the first commit")
check(checkpoint_steps(half) == [4, 8, 12], "complete checkpoints now: step_4, step_8, step_12")
print("PASS")
