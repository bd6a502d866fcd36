#!/usr/bin/env bash
# Tokenizer throughput: `tetra data prepare --tokenizer` beside Hugging Face `tokenizers`
# (encode_batch, scripts/bench/tokenize_peer.py) on the same text, the same number of threads;
# checks that both give the same ids and prints one JSON line each, then a summary line (exit 1
# where the ids differ).
#
#   scripts/bench/tokenize_throughput.sh TOKENIZER.json [GB] [DIR]
#       GB of text (default 1) made under DIR (default runs/bench/tokenize) from files every machine
#       has offline: the Python installation's sources, /usr/include and /usr/share text, in files
#       of about DOC_KB kB (default 4000; each file one document), repeated where they fall short
#       of GB. Hugging Face `tokenizers` slows down on documents of megabytes (1 thread: 0.9 MB/s on
#       4 MB documents), so compare at a document size of the data you have (e.g. DOC_KB=64).
#
# Knobs (environment): THREADS (default: the cores), BUILD (build) or TETRA_BIN, PYTHON (python3,
# with numpy, h5py and tokenizers). tetra runs with --workers THREADS where the binary has that
# flag (else one thread: the per-core rate is then what to compare), and with --eos none --bos none
# where it has those (the peer adds no document tokens).
set -euo pipefail
cd "$(dirname "$0")/../.."
tokenizer=${1:?usage: tokenize_throughput.sh TOKENIZER.json [GB] [DIR]}
gb=${2:-1}
dir=${3:-runs/bench/tokenize}
threads=${THREADS:-$(nproc)}
doc_kb=${DOC_KB:-4000}
tetra=${TETRA_BIN:-${BUILD:-build}/tetra}
py=${PYTHON:-python3}
[ -x "$tetra" ] || { echo "tokenize_throughput.sh: $tetra is not built (set BUILD= or TETRA_BIN=)" >&2; exit 2; }
"$py" -c "import numpy, h5py, tokenizers" || { echo "tokenize_throughput.sh: $py needs numpy, h5py and tokenizers" >&2; exit 2; }
mkdir -p "$dir/text"

# The text: source and documentation files, concatenated into ~DOC_KB kB documents, until GB.
"$py" scripts/bench/gather_text.py "$dir/text" "$(awk -v gb="$gb" 'BEGIN { print gb * 1000 }')" "$doc_kb"
files=("$dir"/text/doc*.txt)
bytes=$(cat "${files[@]}" | wc -c)

peer=$("$py" scripts/bench/tokenize_peer.py --tokenizer "$tokenizer" --threads "$threads" "${files[@]}")
echo "$peer"

help=$("$tetra" data prepare --help 2>&1 || true)
extra=()
grep -q -- "--workers" <<<"$help" && extra+=(--workers "$threads")
grep -q -- "--eos" <<<"$help" && extra+=(--eos none)
grep -q -- "--bos" <<<"$help" && extra+=(--bos none)
inputs=()
for f in "${files[@]}"; do inputs+=(--input "$f"); done
rm -f "$dir/tokens.h5"
start=$(date +%s.%N)
"$tetra" data prepare "${inputs[@]}" --tokenizer "$tokenizer" --out "$dir/tokens.h5" "${extra[@]}" >"$dir/prepare.log"
end=$(date +%s.%N)

"$py" - "$dir/tokens.h5" "$bytes" "$start" "$end" "$peer" "${extra[*]}" <<'PY'
import hashlib, json, sys
import h5py, numpy as np
path, nbytes, start, end, peer, extra = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), json.loads(sys.argv[5]), sys.argv[6]
with h5py.File(path, "r") as f:
    ids = np.asarray(f["tokens"][...], dtype="<u4")
seconds = end - start
workers = extra.split()[extra.split().index("--workers") + 1] if "--workers" in extra else "1"
mine = {"tool": "tetra", "threads": int(workers), "bytes": nbytes, "tokens": int(ids.size), "seconds": round(seconds, 3),
        "mb_per_s": round(nbytes / 1e6 / seconds, 2), "ids_sha256": hashlib.sha256(ids.tobytes()).hexdigest(),
        "note": "wall time of the whole command: reading, tokenizing, writing HDF5"}
print(json.dumps(mine))
equal = mine["ids_sha256"] == peer["ids_sha256"]
print(json.dumps({"summary": True, "ids_equal": equal,
                  "tetra_over_tokenizers": round(mine["mb_per_s"] / peer["mb_per_s"], 2),
                  "tetra_mb_per_s_per_thread": round(mine["mb_per_s"] / mine["threads"], 2),
                  "tokenizers_mb_per_s": peer["mb_per_s"], "tokenizers_threads": peer["threads"]}))
sys.exit(0 if equal else 1)
PY
