#!/usr/bin/env python3
"""bf16 runs start their fp32 master weights from the source's full precision, bit for bit:
  - model.init_from an fp32 consolidated file (written by `tetra ckpt consolidate` from a CPU run,
    its values full fp32 mantissas that bf16 cannot hold) at ZeRO stages 0, 1 and 3 on one GPU, and
    at stages 1 and 3 over two GPUs (each rank's shard), the master saved after one step at a
    learning rate too small to move an fp32 weight equals the file's values;
  - random initialisation: the same seed gives the master the fp32 draws of a CPU fp32 run.
Before, the master was copied from the bf16 working copy, so it held the values rounded to bf16.
An element that starts at zero (a zero-initialised bias) moves by at most lr·|m̂/(√v̂+ε)| ≤ 1e-30 in
that step, by an amount that depends on its gradient (which differs between the CPU and the GPU):
it is compared as |x| ≤ 1e-25, every other element bit for bit. Exits 77 (skipped) without a GPU; the two-GPU runs are left out with fewer than two.

usage: master_init_gpu.py TETRA_BIN WORK_DIR"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from script_util import require_gpus  # noqa: E402
from tetra_runs import Workspace, check, state_of  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
gpus = require_gpus(1)
ws = Workspace(tetra, work, steps=1, every=1)
# One optimizer step that leaves every non-zero fp32 weight as it is (|update| ≤ lr = 1e-30).
NO_OP = ["optimizer.lr=1e-30", "optimizer.min_lr=0", "optimizer.warmup_steps=0", "optimizer.weight_decay=0"]
GPU = ["train.device=cuda", "train.precision=bf16"]


def master(name):
    _, state = state_of(os.path.join(ws.run_dir(name), "checkpoints", "step_1"))
    return {n: s["master"] for n, s in state.items()}


def bf16_rounded(x):
    """x rounded to bf16 (nearest even) and back to fp32."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def compare(what, got, want):
    check(got.keys() == want.keys(), f"{what}: the same parameters")
    for n in want:
        w, g = want[n], got[n]
        # Zero at the start (a zero-initialised bias; |w| ≤ 1e-25 where the reference took the
        # no-op step itself): may move by ≤ 1e-30 in the no-op step.
        moved = np.abs(w) <= 1e-25
        same = g[~moved].tobytes() == w[~moved].tobytes() and bool(np.all(np.abs(g[moved]) <= 1e-25))
        if not same:
            diff = int(np.count_nonzero(g[~moved].view(np.uint32) != w[~moved].view(np.uint32)))
            rounded = bool(np.array_equal(g[~moved], bf16_rounded(w[~moved])))
            print(f"{n}: {diff} of {w.size} elements differ{' (the bf16-rounded values)' if rounded else ''}")
        check(same, f"{what}: {n}: the master equals the fp32 source bit for bit")


# The source: one CPU fp32 step from the seed's draws, consolidated into one fp32 file.
ws.train("source", 1, ["optimizer.warmup_steps=0"])
source = master("source")
src_file = os.path.join(ws.work, "source.h5")
ws.tetra_cmd("ckpt", "consolidate", os.path.join(ws.run_dir("source"), "checkpoints", "step_1"), "--out", src_file)
lost = sum(int(np.count_nonzero(bf16_rounded(v) != v)) for v in source.values())
total = sum(v.size for v in source.values())
check(lost > total // 2, f"the source's values need fp32: {lost} of {total} are not bf16 values")

for np_, stage in ((1, 0), (1, 1), (1, 3), (2, 1), (2, 3)):
    if np_ > gpus:
        print(f"ZeRO {stage} over {np_} GPUs: left out ({gpus} GPU visible)")
        continue
    name = f"init_from_z{stage}_np{np_}"
    ws.train(name, np_, GPU + NO_OP + [f"model.init_from={src_file}", f"parallel.zero_stage={stage}"], timeout=300)
    compare(f"init_from, ZeRO {stage}, {np_} GPU", master(name), source)

# Random initialisation: the seed's fp32 draws on the CPU (fp32 working weights: the master is
# the draws themselves) and on the GPU under bf16.
ws.train("draws_cpu", 1, NO_OP)
ws.train("draws_gpu", 1, GPU + NO_OP, timeout=300)
compare("random initialisation", master("draws_gpu"), master("draws_cpu"))
print("PASS")
