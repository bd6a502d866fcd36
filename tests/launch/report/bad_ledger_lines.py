#!/usr/bin/env python3
"""A damaged goodput.jsonl (a line that is not UTF-8, one that is not JSON, in the middle of the
file) costs nothing but those lines: the resumed run that appends to the ledger finishes with
exit 0 and its report names the lines it skipped, and so does `tetra report`.

usage: bad_ledger_lines.py TETRA_BIN WORK_DIR"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, checkpoint_steps, metrics  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=4, every=2)
ws.train("bad")
run = ws.run_dir("bad")
path = os.path.join(run, "goodput.jsonl")
with open(path, "rb") as f:
    lines = f.read().split(b"\n")[:-1]
n = len(lines)
# Line 2 loses a byte to a flipped bit (0xff is never UTF-8); line n + 1 (after the first attempt's
# last line) is stray text.
lines[1] = lines[1].replace(b'"attempt"', b'"\xffttempt"', 1)
lines.append(b"stray text, not JSON")
with open(path, "wb") as f:
    f.write(b"\n".join(lines) + b"\n")

out, err, _ = ws.train("bad", sets=["checkpoint.resume=auto", "train.steps=6"])
check(f"warning: {path} line 2: not valid UTF-8" in err and f"{path} line {n + 1}: not a JSON object" in err,
      "the resumed run warns of both lines when it opens the ledger")
check("goodput.jsonl line 2: not valid UTF-8" in out and f"goodput.jsonl line {n + 1}: not valid JSON" in out,
      "the resumed run finishes (exit 0) and its report names both skipped lines")
check(max(metrics(run)) == 6 and checkpoint_steps(run) == [2, 4, 6], "the resumed run trained to step 6")
with open(path, "rb") as f:
    tail = [json.loads(line) for line in f.read().split(b"\n")[n + 1:] if line.strip()]
ends = [(e["reason"], e["exit_code"]) for e in tail if e["event"] == "attempt_end"]
check(ends == [("finished", 0)] and all(e["attempt"] == 2 for e in tail), "attempt 2 is recorded as finished (exit 0)")
with open(os.path.join(run, "goodput.json")) as f:
    report = json.load(f)
check(report["finished"] and report["steps"]["kept"] == 6 and len(report["warnings"]) >= 2,
      "goodput.json is whole: 6 kept steps and the warnings")

out, _, _ = ws.tetra_cmd("report", run)
check("goodput.jsonl line 2: not valid UTF-8" in out and f"goodput.jsonl line {n + 1}: not valid JSON" in out,
      "tetra report exits 0 and names both lines")
print("PASS")
