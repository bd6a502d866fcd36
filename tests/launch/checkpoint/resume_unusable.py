#!/usr/bin/env python3
"""checkpoint.resume: auto never starts over by surprise:
  - checkpoints there, none usable (damaged rank files, a meta.json cut short): exit 2 listing each
    with its reason and saying that checkpoint.resume: none starts afresh; nothing is renamed, so
    the same command fails the same way again;
  - a checkpoint whose files cannot be read is not damaged: the run stops (exit 1) naming the file,
    nothing is renamed, not even when an older checkpoint is usable. Provoked as root too: a
    directory where meta.json belongs makes read(2) fail with EISDIR, one where a rank file belongs
    is no file to read. A file without read permission (EACCES) is tried as well where the test
    does not run as root (root reads it anyway);
  - checkpoint.resume: none then starts from step 0.

usage: resume_unusable.py TETRA_BIN WORK_DIR"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, checkpoint_steps, metrics  # noqa: E402

EXIT_ERROR, EXIT_CONFIG = 1, 2
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=8, every=4)
ws.train("good")
good = ws.run_dir("good")
run = ws.run_dir("run")
ck = os.path.join(run, "checkpoints")


def fresh_copy():
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(good, run)


def listing():
    return sorted(os.listdir(ck))


def flip_byte(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))


def resume(expect):
    out, err, _ = ws.train("run", sets=["checkpoint.resume=auto"], expect=expect)
    return out + err


# Every checkpoint damaged.
fresh_copy()
flip_byte(os.path.join(ck, "step_8", "rank_00001.h5"))
with open(os.path.join(ck, "step_4", "meta.json"), "r+") as f:
    f.truncate(40)
before = listing()
text = resume(EXIT_CONFIG)
check("found 2 checkpoints in " + ck + " and none can be used" in text, "none usable: exit 2, says so")
check("  step_8: rank 1: rank_00001.h5: CRC-32" in text and "  step_4: " in text and "not valid JSON" in text,
      "none usable: each checkpoint listed with its reason")
check("checkpoint.resume: none" in text and "starting from step 0" not in text,
      "none usable: names checkpoint.resume: none and does not start over")
check(listing() == before == ["step_4", "step_8"], "none usable: nothing renamed")
resume(EXIT_CONFIG)
check(listing() == before, "none usable: the same command refuses again, still nothing renamed")


def unreadable(make, what, needle):
    """make(step_8 dir) makes one of its files unreadable; step_4 stays usable."""
    fresh_copy()
    make(os.path.join(ck, "step_8"))
    before = listing()
    text = resume(EXIT_ERROR)
    check("cannot read " + ck + "/step_8" in text and needle in text and "nothing was renamed" in text,
          f"{what}: exit 1 naming the file and why")
    check(listing() == before and "resumed from" not in text and "ignoring" not in text,
          f"{what}: nothing renamed, and step_4 is not resumed from in its place")
    check(not os.path.exists(os.path.join(run, "metrics.jsonl")) or max(metrics(run)) == 8,
          f"{what}: no step trained")


def dir_for(name):
    def make(d):
        os.remove(os.path.join(d, name))
        os.mkdir(os.path.join(d, name))
    return make


unreadable(dir_for("rank_00001.h5"), "a directory in place of rank 1's file", "rank_00001.h5")
unreadable(dir_for("meta.json"), "a directory in place of meta.json", "meta.json: cannot read: Is a directory")
if os.geteuid() != 0:
    unreadable(lambda d: os.chmod(os.path.join(d, "rank_00000.h5"), 0), "rank 0's file without read permission",
               "Permission denied")
    os.chmod(os.path.join(ck, "step_8", "rank_00000.h5"), 0o644)
else:
    print("note: running as root, which reads a file without read permission; the EACCES case is not tried")

# A damaged newest checkpoint with a usable older one: set aside as before, resumed from step_4.
fresh_copy()
flip_byte(os.path.join(ck, "step_8", "rank_00000.h5"))
text = resume(0)
check("resumed from " + ck + "/step_4 " in text and "step_8.discarded" in listing(),
      "a damaged step_8 is still set aside when step_4 is usable")

# The way out the message names.
fresh_copy()
dir_for("meta.json")(os.path.join(ck, "step_8"))
out, _, _ = ws.train("run", sets=["checkpoint.resume=none"])
check("resumed from" not in out and checkpoint_steps(run) == [4, 8] and max(metrics(run)) == 8,
      "checkpoint.resume: none starts from step 0")
print("PASS")
