#!/usr/bin/env bash
# `tetra train` on the CPU reading a blend of a glob of llm.c shards and an HDF5 file, with the tail
# of each held out for validation: the loader says what it reads and how, the goodput ledger
# records the read path, and the losses do not depend on the prefetch depth or reader threads.
set -euo pipefail
tetra=${TETRA_BIN:?}
py=${TETRA_PYTHON:-/usr/bin/python3}
dir=$(mktemp -d "$PWD/loader_train_e2e.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$py" - "$dir" <<'PY'
import sys, numpy as np, h5py
d = sys.argv[1]
rng = np.random.default_rng(3)
# Byte-level "text" with structure (a repeating phrase with noise) so the loss can fall.
def text(n):
    base = np.frombuffer(b"the quick brown fox jumps over the lazy dog. " * (n // 45 + 1), dtype=np.uint8)[:n]
    noise = rng.integers(0, 256, size=n, dtype=np.uint8)
    return np.where(rng.random(n) < 0.1, noise, base).astype(np.uint16)
for i, n in enumerate((20000, 15000)):
    h = np.zeros(256, dtype=np.int32); h[:3] = (20240520, 1, n)
    with open(f"{d}/a_{i}.bin", "wb") as f:
        f.write(h.tobytes()); f.write(text(n).tobytes())
with h5py.File(f"{d}/b.h5", "w") as f:
    f.create_dataset("tokens", data=text(30000))
    f.attrs["vocab_size"] = 256
    f.attrs["tokenizer"] = "byte"
PY
cat > "$dir/cfg.yaml" <<YAML
run: {name: e2e, output_dir: $dir/runs, seed: 7}
model: {vocab_size: 256, seq_len: 32, d_model: 32, n_layers: 2, n_heads: 2}
parallel: {dp: 1}
train: {steps: 8, global_batch: 8, micro_batch: 2, device: cpu, precision: fp32, eval_every: 4, eval_batches: 2}
optimizer: {lr: 1.0e-3, warmup_steps: 0}
data:
  train: [{path: "$dir/a_*.bin", weight: 0.6}, {path: $dir/b.h5, weight: 0.4}]
  val_fraction: 0.05
checkpoint: {every: 0}
YAML
"$tetra" train "$dir/cfg.yaml" --set run.name=p0 --set data.prefetch=0 --set data.loader_threads=1 > "$dir/p0.log"
"$tetra" train "$dir/cfg.yaml" --set run.name=p6 --set data.prefetch=6 --set data.loader_threads=3 > "$dir/p6.log"
fail() { echo "loader_train_e2e: $*" >&2; cat "$dir/p6.log" >&2; exit 1; }
grep -q "tetra: data: train 3 shards, 2 datasets (weights 0.6, 0.4)" "$dir/p6.log" || fail "no data line"
grep -q "tetra: data: validation .* windows from data.val_fraction, 2 batches per evaluation" "$dir/p6.log" || fail "no validation line"
grep -q "tetra: data: read path posix — auto: the CPU backend reads into host memory" "$dir/p6.log" || fail "no read path line"
grep -q "tetra: data: 3 reader threads, prefetch 6 micro-batches" "$dir/p6.log" || fail "no pipeline line"
grep -q "read by posix" "$dir/p6.log" || fail "the goodput report does not name the read path"
"$py" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def losses(name):
    rows = [json.loads(l) for l in open(f"{d}/runs/{name}/metrics.jsonl")]
    return [(r["step"], r["loss"], r.get("val_loss")) for r in rows]
a, b = losses("p0"), losses("p6")
if a != b or len(a) != 8:
    sys.exit(f"loader_train_e2e: losses differ between prefetch depths:\n{a}\n{b}")
if not any(v is not None for _, _, v in a):
    sys.exit("loader_train_e2e: no validation loss was recorded")
info = [json.loads(l) for l in open(f"{d}/runs/p6/goodput.jsonl") if '"run_info"' in l]
if not info or info[0].get("data_io") != "posix" or "CPU backend" not in info[0].get("data_io_reason", ""):
    sys.exit(f"loader_train_e2e: run_info lacks the read path: {info}")
print("loader_train_e2e: ok", a[0][1], "->", a[-1][1])
PY
