#!/usr/bin/env python3
"""A run whose memory plan does not fit stops before it allocates anything: on the CPU the plan of
every rank of the host together is compared with the host's physical memory. A ~39B-parameter
model on 2 CPU ranks exits 2 within seconds, printing the plan and the keys to change, and leaves
no checkpoint; a model that fits runs. `tetra plan` on the same config still prints the plan.

usage: memory_fit.py TETRA_BIN WORK_DIR"""
import os
import sys
import resource

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=2, every=0)
big = ["model.d_model=8192", "model.n_heads=64", "model.n_layers=48"]
_, err, _ = ws.train("too_big", sets=big, expect=2)
print(err[-1500:])
# Before allocating: no process of the job (nor any earlier child of this test) grew past 2 GiB, while
# the model alone needs ~150 GiB in fp32 (ru_maxrss of waited-for descendants, in KiB).
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
check(peak_kib < 2 << 20, f"the run stopped before allocating the model (peak RSS {peak_kib >> 10} MiB)")
check("the memory plan needs" in err and "× 2 ranks on this host" in err and "but the host has" in err,
      "the error compares the plan of the host's ranks with its memory")
check("optimizer state" in err and "parallel.zero_stage" in err and "--set model.d_model" in err,
      "the error gives the plan's parts and the keys to change, with where they were set")
out, _, _ = ws.tetra_cmd("plan", ws.cfg, "--world", "2", *[a for s in big for a in ("--set", s)])
check("memory per device" in out, "tetra plan prints the plan of the same config")
ws.train("fits")
print("PASS")
