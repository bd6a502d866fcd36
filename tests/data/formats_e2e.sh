#!/usr/bin/env bash
# The token formats tetra reads, each written here by an independent writer (numpy, following the
# published layouts: Megatron-LM's indexed_dataset.py, llm.c's dev/data/data_common.py) from the
# same tokens: `tetra train` reads them in order with the same losses as from HDF5; `tetra data
# inspect` reads every Megatron dtype code alike; broken files are clear errors; and the Megatron
# dataset `tetra data prepare --out-format megatron` writes parses with numpy as the layout says.
set -euo pipefail
tetra=${TETRA_BIN:?}
py=${TETRA_PYTHON:-/usr/bin/python3}
dir=$(mktemp -d "$PWD/formats_e2e.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$py" - "$dir" <<'PY'
import sys, struct, numpy as np, h5py
d = sys.argv[1]
rng = np.random.default_rng(5)
n = 24000
base = np.frombuffer(b"the quick brown fox jumps over the lazy dog. " * (n // 45 + 1), dtype=np.uint8)[:n]
noise = rng.integers(0, 128, size=n, dtype=np.uint8)
tokens = np.where(rng.random(n) < 0.1, noise, base).astype(np.int64)  # ids < 128: every dtype holds them
cuts = np.sort(rng.choice(np.arange(1, n), size=40, replace=False))
lengths = np.diff(np.concatenate([[0], cuts, [n]]))
open(f"{d}/first_doc", "w").write(str(lengths[0]))

with h5py.File(f"{d}/ref.h5", "w") as f:
    f.create_dataset("tokens", data=tokens.astype(np.uint16))
    f.attrs["vocab_size"] = 256
    f.attrs["tokenizer"] = "byte"

def llmc(path, magic, version, dtype, count=None):
    h = np.zeros(256, dtype=np.int32); h[:3] = (magic, version, len(tokens) if count is None else count)
    with open(path, "wb") as f:
        f.write(h.tobytes()); f.write(tokens.astype(dtype).tobytes())
llmc(f"{d}/v1.bin", 20240520, 1, np.uint16)
llmc(f"{d}/v7.bin", 20240801, 7, np.uint32)
llmc(f"{d}/bad_v7.bin", 20240801, 1, np.uint32)

codes = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}
def megatron(prefix, code, seq_lengths=lengths, docs=None, magic=b"MMIDIDX\x00\x00", version=1,
             pointers=None, modes=False, cut=0):
    dt = codes.get(code, np.uint16)
    with open(prefix + ".bin", "wb") as f:
        f.write(tokens.astype(dt).tobytes())
    item = np.dtype(dt).itemsize
    ptr = np.concatenate([[0], np.cumsum(seq_lengths)[:-1]]) * item if pointers is None else pointers
    docs = np.arange(len(seq_lengths) + 1) if docs is None else docs
    idx = magic + struct.pack("<Q", version) + struct.pack("<B", code)
    idx += struct.pack("<Q", len(seq_lengths)) + struct.pack("<Q", len(docs))
    idx += np.asarray(seq_lengths, dtype=np.int32).tobytes() + np.asarray(ptr, dtype=np.int64).tobytes()
    idx += np.asarray(docs, dtype=np.int64).tobytes()
    if modes: idx += np.zeros(len(seq_lengths), dtype=np.int8).tobytes()
    with open(prefix + ".idx", "wb") as f:
        f.write(idx[:len(idx) - cut])
for code in codes:
    megatron(f"{d}/m{code}", code)
megatron(f"{d}/mm", 8, modes=True)                                   # multimodal: a mode byte per sequence
# Two sequences per document (as Megatron's builder writes split sentences).
megatron(f"{d}/mdocs", 8, docs=np.concatenate([np.arange(0, len(lengths), 2), [len(lengths)]]))
megatron(f"{d}/bad_magic", 8, magic=b"MMIDIDY\x00\x00")
megatron(f"{d}/bad_version", 8, version=2)
megatron(f"{d}/bad_code", 9)
megatron(f"{d}/bad_cut", 8, cut=5)
past = np.concatenate([[0], np.cumsum(lengths)[:-1]]) * 2
past[-1] += 2 * n
megatron(f"{d}/bad_past", 8, pointers=past)
PY

# One tiny model per format, reading in order (no shuffling): the losses must equal the HDF5 run's.
cat > "$dir/cfg.yaml" <<YAML
run: {name: e2e, output_dir: $dir/runs, seed: 7}
model: {vocab_size: 256, seq_len: 32, d_model: 32, n_layers: 2, n_heads: 2}
parallel: {dp: 1}
train: {steps: 6, global_batch: 8, micro_batch: 4, device: cpu, precision: fp32}
optimizer: {lr: 1.0e-3, warmup_steps: 0}
data: {train: $dir/ref.h5, shuffle: false}
checkpoint: {every: 0}
YAML
run() { "$tetra" train "$dir/cfg.yaml" --set run.name="$1" --set data.train="$2" > "$dir/$1.log" 2>&1 ||
        { cat "$dir/$1.log" >&2; echo "formats_e2e: tetra train on $2 failed" >&2; exit 1; }; }
run ref "$dir/ref.h5"
run v1 "$dir/v1.bin"
run v7 "$dir/v7.bin"
run m8 "$dir/m8"            # uint16, raw reads; named by its prefix
run m4 "$dir/m4.idx"        # int32, raw reads; named by its index
run m5 "$dir/m5.bin"        # int64, converted on the host; named by its data file
run mglob "$dir/m4.[bi][in][nx]"   # a glob matching both files of the pair: one dataset
grep -q "tetra: data: train 1 shard," "$dir/mglob.log" || { cat "$dir/mglob.log" >&2; echo "formats_e2e: the pair counted twice" >&2; exit 1; }
"$tetra" train "$dir/cfg.yaml" --set run.name=blend \
  --set "data.train=[{path: $dir/m8, weight: 0.5}, {path: $dir/v7.bin, weight: 0.3}, {path: $dir/ref.h5, weight: 0.2}]" \
  > "$dir/blend.log" 2>&1 || { cat "$dir/blend.log" >&2; echo "formats_e2e: a blend of the three formats failed" >&2; exit 1; }
"$py" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def losses(name):
    return [(r["step"], r["loss"]) for r in map(json.loads, open(f"{d}/runs/{name}/metrics.jsonl"))]
ref = losses("ref")
assert len(ref) == 6, ref
for name in ("v1", "v7", "m8", "m4", "m5", "mglob"):
    got = losses(name)
    if got != ref:  # the same ids in the same order: bit-identical losses
        sys.exit(f"formats_e2e: {name} trains differently from HDF5:\n{got}\n{ref}")
print("formats_e2e: training losses equal across formats", ref[0][1], "->", ref[-1][1])
PY

# Every Megatron dtype code reads as the same tokens.
"$tetra" data inspect "$dir/ref.h5" > "$dir/ref.txt"
want_ids=$(grep '^ids used:' "$dir/ref.txt" | sed 's/ (vocab_size.*//')
want_first=$(grep '^first ' "$dir/ref.txt")
for m in m1 m2 m3 m4 m5 m6 m7 m8 mm v1 v7; do
  f="$dir/$m"; [ -e "$f.bin" ] && [ ! -e "$f.idx" ] && f="$f.bin"
  "$tetra" data inspect "$f" > "$dir/$m.txt" || { echo "formats_e2e: inspect $m failed" >&2; exit 1; }
  grep -q "^tokens:     24000$" "$dir/$m.txt" || { cat "$dir/$m.txt" >&2; echo "formats_e2e: $m token count" >&2; exit 1; }
  [ "$(grep '^ids used:' "$dir/$m.txt")" = "$want_ids" ] || { cat "$dir/$m.txt" >&2; echo "formats_e2e: $m ids used differ" >&2; exit 1; }
  [ "$(grep '^first ' "$dir/$m.txt")" = "$want_first" ] || { echo "formats_e2e: $m first tokens differ" >&2; exit 1; }
done
grep -q "^format:     megatron indexed (float32)$" "$dir/m7.txt" || { cat "$dir/m7.txt" >&2; exit 1; }
grep -q "^documents:  41$" "$dir/m8.txt" || { cat "$dir/m8.txt" >&2; echo "formats_e2e: megatron documents" >&2; exit 1; }
"$tetra" data inspect "$dir/mdocs" | grep -q "^documents:  21$" || { echo "formats_e2e: megatron document indices" >&2; exit 1; }
grep -q "^format:     llm.c .bin (version 7)$" "$dir/v7.txt" || { cat "$dir/v7.txt" >&2; exit 1; }
"$tetra" data inspect "$dir/m8" --tokenizer byte |
  grep -q "^document 0: \".*\" .*of its $(cat "$dir/first_doc") tokens, decoded by byte)$" ||
  { echo "formats_e2e: inspect --tokenizer does not decode the first document" >&2; exit 1; }

# Broken files: exit 1 and a message that names the file and the fault.
expect_error() {  # FILE SUBSTRING
  local rc=0
  "$tetra" data inspect "$1" > "$dir/err.out" 2> "$dir/err.txt" || rc=$?
  [ "$rc" = 1 ] || { echo "formats_e2e: inspect $1 exited $rc, expected 1" >&2; cat "$dir/err.txt" >&2; exit 1; }
  grep -qF -- "$2" "$dir/err.txt" || { echo "formats_e2e: inspect $1 did not say '$2':" >&2; cat "$dir/err.txt" >&2; exit 1; }
  grep -qF -- "$(basename "$1")" "$dir/err.txt" || { echo "formats_e2e: the error does not name $1" >&2; exit 1; }
}
expect_error "$dir/bad_magic" "wrong magic bytes"
expect_error "$dir/bad_version.idx" "has version 2; tetra reads version 1"
expect_error "$dir/bad_code" "unknown dtype code 9"
expect_error "$dir/bad_cut" "is truncated: its header declares 41 sequences"
expect_error "$dir/bad_past" "runs past the end of"
expect_error "$dir/bad_v7.bin" "has magic 20240801 with version 1"
rm "$dir/m8.bin"
expect_error "$dir/m8" "cannot open Megatron data file"

# `tetra data prepare --out-format megatron`: the pair parses as the layout says, with the tokens
# and documents of the HDF5 output of the same inputs.
printf 'first document\n' > "$dir/a.txt"; printf 'second one' > "$dir/b.txt"
"$tetra" data prepare --input "$dir/a.txt" "$dir/b.txt" --out "$dir/p.h5" > /dev/null
"$tetra" data prepare --input "$dir/a.txt" "$dir/b.txt" --out-format megatron --out "$dir/pm" > "$dir/pm.log"
grep -q "prepared $dir/pm.bin + $dir/pm.idx: 2 files" "$dir/pm.log" || { cat "$dir/pm.log" >&2; exit 1; }
"$py" - "$dir" <<'PY'
import sys, struct, numpy as np, h5py
d = sys.argv[1]
idx = open(f"{d}/pm.idx", "rb").read()
assert idx[:9] == b"MMIDIDX\x00\x00" and struct.unpack("<Q", idx[9:17])[0] == 1, idx[:17]
code = idx[17]; s, n_docs = struct.unpack("<QQ", idx[18:34])
assert code == 8 and s == 2 and n_docs == 3, (code, s, n_docs)
lengths = np.frombuffer(idx, np.int32, s, 34)
pointers = np.frombuffer(idx, np.int64, s, 34 + 4 * s)
docs = np.frombuffer(idx, np.int64, n_docs, 34 + 12 * s)
assert len(idx) == 34 + 12 * s + 8 * n_docs
toks = np.fromfile(f"{d}/pm.bin", np.uint16)
with h5py.File(f"{d}/p.h5") as f:
    ref, offsets = f["tokens"][:], f["doc_offsets"][:]
assert (toks == ref).all(), (toks, ref)
assert list(lengths) == [15, 10] and list(pointers) == [0, 30] and list(docs) == [0, 1, 2], (lengths, pointers, docs)
assert list(offsets) == [0, 15]
print("formats_e2e: the Megatron writer's files parse as the layout says")
PY
"$tetra" train "$dir/cfg.yaml" --set run.name=small --set model.vocab_size=200 > "$dir/small.log" 2>&1 && {
  echo "formats_e2e: a model with a smaller vocabulary than the data trained" >&2; exit 1; }
grep -q "was tokenized with vocab_size 256 (tokenizer 'byte') but the model's vocab_size is 200" "$dir/small.log" ||
  { cat "$dir/small.log" >&2; exit 1; }
echo "formats_e2e: ok"
