#!/usr/bin/env bash
# The default dataset: the licence texts every Debian/Ubuntu machine carries, byte-tokenized.
# Validation is LGPL-3; training is every other licence file (symlinked aliases skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
TETRA=${TETRA:-build/tetra}
out=${1:-data/tiny}
src=/usr/share/common-licenses
[ -d "$src" ] || { echo "prepare_tiny_data: $src not found; pass your own text with tetra data prepare" >&2; exit 1; }
mkdir -p "$out"
mapfile -t train < <(find "$src" -maxdepth 1 -type f ! -name 'LGPL-3' | sort)
"$TETRA" data prepare --tokenizer byte --input "${train[@]}" --out "$out/train.h5"
"$TETRA" data prepare --tokenizer byte --input "$src/LGPL-3" --out "$out/val.h5"
