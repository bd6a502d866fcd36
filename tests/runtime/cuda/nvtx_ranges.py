#!/usr/bin/env python3
"""NVTX ranges under Nsight Systems: a short GPU run profiled with `nsys profile -t cuda,nvtx`
holds the ranges of domain "tetra" under the Chrome trace's names — every step ("step 1" ..),
every pipeline instruction (pp 1: "F0.0", "B0.0", ..), the "optimizer" — and, with --gpus 2 (dp
2), the collectives ("all_reduce grads[..]"). With TETRA_NVTX=0 the same run under nsys holds none
of them. Exits 77 (skipped) without nsys or with fewer GPUs than it needs.

With --recorder LIB the same checks run without nsys: LIB (tests/runtime/cuda/nvtx_recorder.cpp) is
loaded as the NVTX tool the way Nsight's is (NVTX_INJECTION64_PATH) and writes every range pushed in
domain "tetra" to a file; so the test shows what a profiler would receive on any GPU machine.

usage: nvtx_ranges.py TETRA_BIN WORK_DIR [--gpus 1|2] [--recorder LIB]"""
import argparse, glob, os, shutil, sqlite3, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from script_util import ENV, SKIP, licence_run_config, require_gpus

args = argparse.ArgumentParser()
args.add_argument("tetra")
args.add_argument("work")
args.add_argument("--gpus", type=int, default=1)
args.add_argument("--recorder")
args = args.parse_args()
tetra, work, need, recorder = args.tetra, args.work, args.gpus, args.recorder
nsys = shutil.which("nsys") or next((p for p in ("/usr/local/cuda/bin/nsys",) if os.path.exists(p)), None)
if nsys is None and recorder is None:
    print("no nsys (Nsight Systems) on PATH: skipped")
    sys.exit(SKIP)
tool = "the recorder" if recorder else "nsys"
require_gpus(need)
if recorder is not None and not os.path.isfile(recorder):
    # NVTX ignores an injection library it cannot load, which would read as "no ranges pushed".
    print(f"FAIL: the recorder library {recorder} does not exist (build the tetra_nvtx_recorder target)")
    sys.exit(1)
cfg = licence_run_config(tetra, work, f"""
model: {{arch: gpt2, vocab_size: 256, seq_len: 64, d_model: 64, n_layers: 2, n_heads: 2}}
train: {{steps: 3, global_batch: {4 * need}, micro_batch: 2, device: cuda, precision: bf16}}
optimizer: {{lr: 1.0e-3, warmup_steps: 1}}
checkpoint: {{every: 0}}
""", name="nvtx")


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def run(cmd, env, name):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        fail(f"{name}: the profiled run exited {r.returncode}")


def recorded_ranges(name, env):
    """The range texts the recorder library saw pushed in domain "tetra", over all ranks."""
    prefix = os.path.join(work, name + ".nvtx")
    for f in glob.glob(prefix + ".*"):
        os.remove(f)
    env.update(NVTX_INJECTION64_PATH=os.path.abspath(recorder), NVTX_RECORD_FILE=prefix)
    train = [tetra, "train", cfg, "--set", f"run.name={name}"]
    mpi = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(need)] if need > 1 else []
    run(mpi + train, env, name)
    texts = set()
    for f in glob.glob(prefix + ".*"):
        for line in open(f):
            if line.startswith("push tetra "):
                texts.add(line[len("push tetra "):].rstrip("\n"))
    return texts


def ranges(name, knob):
    """The NVTX range texts of rank 0's report of a profiled run."""
    out = os.path.join(work, name)
    env = dict(ENV)
    env.pop("TETRA_NVTX", None)
    if knob is not None:
        env["TETRA_NVTX"] = knob
    if recorder:
        return recorded_ranges(name, env)
    prof = [nsys, "profile", "-t", "cuda,nvtx", "--force-overwrite", "true", "--export", "sqlite"]
    train = [tetra, "train", cfg, "--set", f"run.name={name}"]
    if need == 1:
        cmd = prof + ["-o", out] + train
    else:  # one report per rank
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(need)] + prof + \
              ["-o", out + ".%q{OMPI_COMM_WORLD_RANK}"] + train
    run(cmd, env, name)
    db = out + (".sqlite" if need == 1 else ".0.sqlite")
    if not os.path.exists(db):
        fail(f"{name}: nsys wrote no {db}")
    con = sqlite3.connect(db)
    tables = {t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "NVTX_EVENTS" not in tables:
        return set()
    cols = {c[1] for c in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
    texts = set()
    if "text" in cols:
        texts |= {t for (t,) in con.execute("SELECT text FROM NVTX_EVENTS WHERE text IS NOT NULL")}
    if "textId" in cols and "StringIds" in tables:
        texts |= {t for (t,) in con.execute(
            "SELECT s.value FROM NVTX_EVENTS e JOIN StringIds s ON e.textId = s.id")}
    return texts


on = ranges("on", None)
print(sorted(on)[:40])
want = ["step 1", "step 2", "step 3", "optimizer", "F0.0", "B0.0"]
missing = [w for w in want if w not in on]
if missing:
    fail(f"ranges missing under {tool}: {missing}")
print(f"ok: the steps, the pipeline instructions and the optimizer are NVTX ranges under {tool}")
if need > 1:
    if not any(t.startswith("all_reduce grads[") for t in on):
        fail("no collective range (all_reduce grads[..]) at dp 2")
    print("ok: the gradient all-reduces are NVTX ranges")
off = ranges("off", "0")
if set(want) & off:
    fail(f"TETRA_NVTX=0 still emits {sorted(set(want) & off)}")
print("ok: TETRA_NVTX=0 emits none")
print("PASS")
