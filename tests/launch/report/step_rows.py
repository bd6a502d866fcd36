#!/usr/bin/env python3
"""The ledger's step-level rows come from every rank: each category is the mean over the ranks
(docs/goodput.md). Rank 1 alone waits 0.5 s for its data in step 3 (TETRA_FAULT data_stall): the
row of step 3 shows a data wait of about 0.25 s (the mean of 0.5 and ~0; rank 0's own figure would
be ~0) and about as much exposed communication (rank 0 waits for rank 1 in the gradient
all-reduce), and every row's categories add up within its step.

usage: step_rows.py TETRA_BIN WORK_DIR"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, ledger  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=5, every=0)
ws.train("stall", fault="data_stall@3:rank=1")
rows = {e["step"]: e for e in ledger(ws.run_dir("stall")) if e["event"] == "step"}
for s, r in sorted(rows.items()):
    print(f"step {s}: {r['end'] - r['start']:.3f} s, data_wait {r['data_wait']:.3f}, exposed_comm "
          f"{r['exposed_comm']:.3f}, optimizer {r['optimizer']:.4f}")
r3 = rows[3]
check(0.2 <= r3["data_wait"] <= 0.35, f"step 3: data wait {r3['data_wait']:.3f} s, the mean of rank 1's 0.5 s and rank 0's ~0")
check(0.15 <= r3["exposed_comm"] <= 0.4, f"step 3: exposed communication {r3['exposed_comm']:.3f} s (rank 0 waited for rank 1)")
check(all(rows[s]["data_wait"] < 0.05 for s in (1, 2, 4, 5)), "the other steps show no data stall")
check(all(r["data_wait"] + r["exposed_comm"] + r["optimizer"] <= (r["end"] - r["start"]) * 1.001 for r in rows.values()),
      "every row's categories add up within its step")
print("PASS")
