#!/usr/bin/env python3
"""`tetra ckpt consolidate` merges a sharded checkpoint into one HDF5 file with Hugging Face
GPT-2 names and layouts (Conv1D weights transposed to [in, out]), the same whether the checkpoint
was written by ZeRO-0 (one rank file holds all) or ZeRO-1 (pieces spread over the rank files); and
model.init_from reads it back exactly: a one-step run at a learning rate too small to change an fp32
weight saves the very same weights. Bad input gets a clear error and a non-zero exit.

usage: consolidate.py TETRA_BIN WORK_DIR"""
import os
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, state_of  # noqa: E402

TRANSPOSED = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=6, every=6)


def consolidate(run, out_name):
    step = os.path.join(ws.run_dir(run), "checkpoints", "step_6")
    out = os.path.join(ws.work, out_name)
    stdout, _, _ = ws.tetra_cmd("ckpt", "consolidate", step, "--out", out)
    check(stdout.startswith("wrote " + out), f"{run}: consolidate says what it wrote")
    meta, state = state_of(step)
    with h5py.File(out, "r") as f:
        check(f.attrs["arch"] == b"gpt2" or f.attrs["arch"] == "gpt2", f"{run}: the file carries the model config")
        names = []
        f.visit(lambda n: names.append(n) if isinstance(f[n], h5py.Dataset) else None)
        check(sorted(names) == sorted(p["name"] for p in meta["params"]), f"{run}: one dataset per parameter")
        for p in meta["params"]:
            want = state[p["name"]]["master"].reshape(p["shape"])
            if p["name"].endswith(TRANSPOSED):
                want = want.T
            got = f[p["name"]][()]
            if got.shape != want.shape or got.tobytes() != want.tobytes():
                check(False, f"{run}: {p['name']} equals the checkpoint's master weights")
    check(True, f"{run}: every tensor equals the checkpoint's master weights (Conv1D ones transposed)")
    return out, state


ws.train("z0", 2, ["parallel.zero_stage=0"])
full0, state0 = consolidate("z0", "z0.h5")
ws.train("z1", 2, ["parallel.zero_stage=1"])
full1, _ = consolidate("z1", "z1.h5")
meta1, _ = state_of(os.path.join(ws.run_dir("z1"), "checkpoints", "step_6"))
check(all(f["pieces"] for f in meta1["files"]), "ZeRO-1: both rank files hold pieces")

# model.init_from: start from the consolidated weights; lr 1e-30 leaves every fp32 weight as it is.
ws.train("init", 1, [f"model.init_from={full0}", "optimizer.lr=1e-30", "optimizer.min_lr=0",
                     "optimizer.warmup_steps=0", "optimizer.weight_decay=0", "train.steps=1", "checkpoint.every=1"])
_, init = state_of(os.path.join(ws.run_dir("init"), "checkpoints", "step_1"))
same = all(init[n]["master"].tobytes() == state0[n]["master"].tobytes() for n in state0)
check(same, "model.init_from loads the consolidated file bit for bit (saved again after a no-op step)")

# Errors: exit 2 for what the user named wrongly, 1 for a damaged checkpoint; no output file left.
step = os.path.join(ws.run_dir("z0"), "checkpoints", "step_6")
_, err, _ = ws.tetra_cmd("ckpt", "consolidate", step + "_nope", "--out", os.path.join(ws.work, "x.h5"), expect=2)
check("no such directory" in err, "a missing directory: exit 2, says so")
_, err, _ = ws.tetra_cmd("ckpt", "consolidate", step, "--out", os.path.join(ws.work, "no", "x.h5"), expect=2)
check("does not exist" in err, "an --out in a missing directory: exit 2, says so")
with open(os.path.join(step, "rank_00000.h5"), "r+b") as f:
    f.seek(2000)
    f.write(b"\xff\xfe")
bad = os.path.join(ws.work, "bad.h5")
_, err, _ = ws.tetra_cmd("ckpt", "consolidate", step, "--out", bad, expect=1)
check("CRC-32" in err and not os.path.exists(bad) and not os.path.exists(bad + ".tmp"),
      "a damaged rank file: exit 1, names the file, writes nothing")
os.remove(os.path.join(step, "meta.json"))
_, err, _ = ws.tetra_cmd("ckpt", "consolidate", step, "--out", bad, expect=1)
check("no meta.json" in err, "no meta.json: exit 1, says the checkpoint is not complete")
print("PASS")
