#!/usr/bin/env python3
"""Every progress line shows MFU and peak memory beside loss, lr, grad norm, tokens/s and eta, and
every metrics.jsonl row has `mfu` and `mem_peak_gib` (a CPU run on two ranks under mpirun, a line
every step). The row's MFU is the step's tokens/s times run_info's FLOPs per token over the peak
of all devices; the memory is tetra's allocator's peak on the CPU (runtime/memory.h), never more
than the peak the run prints at its end from the same counter — the process's resident set, which
also holds MPI, BLAS and the loader, is far above it for this model.

usage: log_line_metrics.py TETRA_BIN WORK_DIR"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, fail, ledger  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=6, every=0)
out, _, _ = ws.train("lines", sets=["log.every=1"])
run = ws.run_dir("lines")

line_re = re.compile(r"^step +(\d+)/6 \| loss [\d.]+ \| lr [\d.e+-]+ \| grad norm [\d.]+ \| [\d.]+[KM]? tok/s \| "
                     r"MFU (\d+\.\d\d)% \| mem ([\d.]+) (MiB|GiB) \| \d+ ms \| eta \S+$")
lines = [m for m in (line_re.match(l) for l in out.splitlines()) if m]
check([int(m.group(1)) for m in lines] == list(range(1, 7)),
      "a progress line per step with loss, lr, grad norm, tok/s, MFU, mem, step time and eta")

rows = [__import__("json").loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
check([r["step"] for r in rows] == list(range(1, 7)) and all("mfu" in r and "mem_peak_gib" in r for r in rows),
      "every metrics.jsonl row has mfu and mem_peak_gib")
info = [e for e in ledger(run) if e["event"] == "run_info"][-1]
peak = info["peak_flops_per_device"] * info["devices"]
for r in rows:
    want = info["flops_per_token"] * r["tokens_per_s"] / peak
    # Both sides are the same double products; 1e-12 allows for the order of the operations.
    if not 0 < r["mfu"] <= 1 or abs(r["mfu"] - want) > 1e-12 * want:
        fail(f"step {r['step']}: mfu {r['mfu']}, want flops_per_token · tokens_per_s / peak = {want}")
print("ok: mfu = flops_per_token · tokens_per_s / (peak_flops_per_device · devices) in every row")

m = re.search(r"memory peak (\d+) B .* measured over the steps", out)
if not m:
    fail("the end-of-run memory peak line is missing")
measured = int(m.group(1))
gib = [r["mem_peak_gib"] * 2**30 for r in rows]
check(all(0 < b for b in gib) and all(a <= b for a, b in zip(gib, gib[1:])),
      "mem_peak_gib is positive and never goes down (a peak since the first step)")
# The end line prints whole bytes (%.0f): 1 B of rounding.
check(gib[-1] <= measured + 1, f"mem_peak_gib ({gib[-1]:.0f} B) is the allocator's peak, within the measured "
      f"{measured} B at the end (not the resident set)")
for mt, r in zip(lines, rows):
    shown = float(mt.group(3)) * (2**30 if mt.group(4) == "GiB" else 2**20)
    # The line rounds to 0.1 MiB (0.01 GiB).
    if abs(shown - r["mem_peak_gib"] * 2**30) > (0.006 * 2**30 if mt.group(4) == "GiB" else 0.06 * 2**20):
        fail(f"step {r['step']}: the line shows mem {mt.group(3)} {mt.group(4)}, metrics.jsonl {r['mem_peak_gib']} GiB")
print("ok: the line's mem is metrics.jsonl's mem_peak_gib")
print("PASS")
