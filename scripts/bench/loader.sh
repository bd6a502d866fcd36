#!/usr/bin/env bash
# Loader throughput: reads a multi-GB token set in training order into GPU memory through each read
# path (gds where cuFile is present, pinned, posix; posix into host memory on a machine without a
# GPU) and prints JSON: GB/s, tokens/s and CPU seconds per GB for each path and order, beside the
# raw sequential read rate of the same files with O_DIRECT (dd iflag=direct), the physical limit of
# that disk.
#
#   scripts/bench/loader.sh [GB] [DIR]       GB of random llm.c shards made under DIR (default 8, runs/bench/loader)
#   FILES="data/fineweb_train_*.bin" scripts/bench/loader.sh     an existing token set instead
#
# Knobs (environment): SEQ (1024), MB micro-batch (16), THREADS (8), PREFETCH (8), ORDERS
# ("shuffled sequential"), PATHS (default: gds pinned posix with a GPU, posix without), MAX_GB (0 =
# one epoch per run), BUILD (build) or BENCH_BIN.
#
# Page cache, so that no run reads from memory: before every run the benchmark writes back and
# drops each file's pages (fdatasync + posix_fadvise POSIX_FADV_DONTNEED) and reports the resident
# share it measured with mincore (page_cache.resident_before, ~0 when the drop worked); gds reads
# with O_DIRECT anyway; dd reads with iflag=direct. Files larger than RAM need none of this.
set -euo pipefail
cd "$(dirname "$0")/../.."
gb=${1:-8}
dir=${2:-runs/bench/loader}
bench=${BENCH_BIN:-${BUILD:-build}/tests/loader/tetra_loader_bench}
py=/usr/bin/python3  # Debian's, with numpy; else the first python3 on PATH that has it
"$py" -c "import numpy" 2>/dev/null || py=$(command -v python3)
[ -x "$bench" ] || { echo "loader.sh: $bench is not built (scripts/build.sh, or set BUILD= / BENCH_BIN=)" >&2; exit 2; }

if [ -z "${FILES:-}" ]; then
  mkdir -p "$dir"
  tokens=$("$py" -c "print(int($gb * 1e9 / 2))")
  shards=8
  # Reuse shards of the right size from an earlier run.
  want=$(( 1024 + 2 * (tokens / shards) ))
  have=$(stat -c %s "$dir"/tok_000000.bin 2>/dev/null || echo 0)
  if [ "$have" != "$want" ] || [ "$(ls "$dir"/tok_*.bin 2>/dev/null | wc -l)" != "$shards" ]; then
    rm -f "$dir"/tok_*.bin
    echo "loader.sh: writing $gb GB of random tokens as $shards llm.c shards in $dir" >&2
    "$py" scripts/bench/make_token_shards.py "$dir/tok" "$tokens" 50257 "$shards" > /dev/null
  fi
  FILES="$dir/tok_*.bin"
fi
# shellcheck disable=SC2086
files=( $FILES )
[ -e "${files[0]}" ] || { echo "loader.sh: no file matches $FILES" >&2; exit 2; }

gpu=0
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then gpu=1; fi
if [ -z "${PATHS:-}" ]; then
  if [ $gpu = 1 ]; then PATHS="gds pinned posix"; else PATHS="posix"; fi
fi
device=cpu
[ $gpu = 1 ] && device=cuda

# The disk's own sequential rate with O_DIRECT and 64 MiB requests: the files one after the other
# (one stream), then all at once (one stream per file: the queue depth NVMe needs to reach its peak).
direct_read() {  # FILE: read it once, without the page cache
  if ! dd if="$1" of=/dev/null bs=64M iflag=direct status=none 2> /dev/null; then
    # A file system without O_DIRECT (tmpfs, some overlays): a buffered read after dropping its pages.
    "$py" -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fdatasync(fd); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" "$1"
    dd if="$1" of=/dev/null bs=64M status=none
    return 1
  fi
}
disk_bytes=0
direct=true
for f in "${files[@]}"; do disk_bytes=$(( disk_bytes + $(stat -c %s "$f") )); done
t0=$(date +%s.%N)
for f in "${files[@]}"; do direct_read "$f" || direct=false; done
t1=$(date +%s.%N)
pids=()
for f in "${files[@]}"; do direct_read "$f" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || direct=false; done
t2=$(date +%s.%N)

out=$(mktemp)
trap 'rm -f "$out"' EXIT
for io in $PATHS; do
  for order in ${ORDERS:-shuffled sequential}; do
    echo "loader.sh: $io, $order" >&2
    if ! "$bench" --files "${files[@]}" --io "$io" --device "$device" --order "$order" --seq-len "${SEQ:-1024}" \
        --micro-batch "${MB:-16}" --threads "${THREADS:-8}" --prefetch "${PREFETCH:-8}" --max-gb "${MAX_GB:-0}" >> "$out"; then
      echo "{\"io\": \"$io\", \"order\": \"$order\", \"error\": \"the run failed; see stderr\"}" >> "$out"
    fi
  done
done

"$py" - "$out" "$disk_bytes" "$t0" "$t1" "$t2" "$direct" "${#files[@]}" "$device" <<'PY'
import json, socket, sys
out, disk_bytes, t0, t1, t2, direct, nfiles, device = sys.argv[1:9]
runs = [json.loads(l) for l in open(out) if l.strip()]
one = int(disk_bytes) / 1e9 / (float(t1) - float(t0))
parallel = int(disk_bytes) / 1e9 / (float(t2) - float(t1))
disk = max(one, parallel)
report = {
    "bench": "loader",
    "host": socket.gethostname(),
    "device": device,
    "files": int(nfiles),
    "bytes": int(disk_bytes),
    "disk": {"method": "dd bs=64M " + ("iflag=direct" if direct == "true" else "buffered after POSIX_FADV_DONTNEED (no O_DIRECT here)"),
             "gb_per_s": disk, "gb_per_s_one_stream": one, "gb_per_s_stream_per_file": parallel},
    "runs": runs,
    "summary": [{"io": r.get("io"), "order": r.get("order"), "gb_per_s": r.get("gb_per_s"),
                 "tokens_per_s": r.get("tokens_per_s"), "cpu_seconds_per_gb": r.get("cpu_seconds_per_gb"),
                 "share_of_disk": (r["gb_per_s"] / disk) if "gb_per_s" in r and disk > 0 else None,
                 "page_cache_resident_before": r.get("page_cache", {}).get("resident_before"),
                 "error": r.get("error")} for r in runs],
}
print(json.dumps(report, indent=2))
PY
