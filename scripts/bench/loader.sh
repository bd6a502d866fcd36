#!/usr/bin/env bash
# Loader throughput: reads a multi-GB token set in training order into GPU memory through each read
# path (gds where cuFile is present, pinned, posix; posix into host memory on a machine without a
# GPU) and prints JSON: GB/s, tokens/s and CPU seconds per GB for each path and order, beside the
# raw sequential read rate of the same files with O_DIRECT (dd iflag=direct), the physical limit of
# that disk, and the disk's random-read rate for requests of one window (O_DIRECT, rounded up to
# 4 KiB) at the loader's thread count and at threads × micro-batch (the queue depth the host paths'
# read-ahead hints reach on a shuffled micro-batch): the physical floor beside the shuffled order.
#
#   scripts/bench/loader.sh [GB] [DIR]       GB of random llm.c shards made under DIR (default 8, runs/bench/loader)
#   FILES="data/fineweb_train_*.bin" scripts/bench/loader.sh     an existing token set instead
#
# Knobs (environment): SEQ (1024), MB micro-batch (16), THREADS (8), PREFETCH (8), ORDERS
# ("shuffled sequential"), PATHS (default: gds pinned posix with a GPU, posix without), MAX_GB (0 =
# one epoch per run), BUILD (build) or BENCH_BIN, RANDOM_THREADS (random-read queue depths, default
# "THREADS THREADS×MB"), RANDOM_SECONDS (3 per depth, and at most 1 GB each), REPEAT (1: rounds of
# every path and order, interleaved; "median" then gives each one's median).
#
# Page cache, so that no run reads from memory: before every run the benchmark writes back and
# drops each file's pages (fdatasync + posix_fadvise POSIX_FADV_DONTNEED) and reports the resident
# share it measured with mincore (page_cache.resident_before, ~0 when the drop worked); gds reads
# with O_DIRECT anyway; dd reads with iflag=direct. Files larger than RAM need none of this.
set -euo pipefail
cd "$(dirname "$0")/../.."
gb=${1:-8}
dir=${2:-runs/bench/loader}
bench=${BENCH_BIN:-${BUILD:-build}/scripts/bench/tetra_loader_bench}
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
random_out=$(mktemp)
trap 'rm -f "$out" "$random_out"' EXIT
# The disk's random-read rate at one window per request (no page cache: O_DIRECT).
threads=${THREADS:-8}
for qd in ${RANDOM_THREADS:-$threads $(( threads * ${MB:-16} ))}; do
  echo "loader.sh: random reads, $qd at a time" >&2
  if ! "$bench" --random-read --files "${files[@]}" --seq-len "${SEQ:-1024}" --threads "$qd" \
      --seconds "${RANDOM_SECONDS:-3}" --max-gb 1 >> "$random_out"; then
    echo "{\"mode\": \"random_read\", \"threads\": $qd, \"error\": \"the run failed; see stderr\"}" >> "$random_out"
  fi
done
# REPEAT rounds of every path and order, interleaved, so that a drift of the disk hits all alike.
for rep in $(seq "${REPEAT:-1}"); do
  for io in $PATHS; do
    for order in ${ORDERS:-shuffled sequential}; do
      echo "loader.sh: $io, $order (round $rep)" >&2
      if ! "$bench" --files "${files[@]}" --io "$io" --device "$device" --order "$order" --seq-len "${SEQ:-1024}" \
          --micro-batch "${MB:-16}" --threads "$threads" --prefetch "${PREFETCH:-8}" --max-gb "${MAX_GB:-0}" >> "$out"; then
        echo "{\"io\": \"$io\", \"order\": \"$order\", \"error\": \"the run failed; see stderr\"}" >> "$out"
      fi
    done
  done
done

"$py" - "$out" "$disk_bytes" "$t0" "$t1" "$t2" "$direct" "${#files[@]}" "$device" "$random_out" "$threads" "${files[0]}" <<'PY'
import json, os, socket, sys
out, disk_bytes, t0, t1, t2, direct, nfiles, device, random_out, threads, first = sys.argv[1:12]
runs = [json.loads(l) for l in open(out) if l.strip()]
randoms = [json.loads(l) for l in open(random_out) if l.strip()]
one = int(disk_bytes) / 1e9 / (float(t1) - float(t0))
parallel = int(disk_bytes) / 1e9 / (float(t2) - float(t1))
disk = max(one, parallel)
# The random-read rate at the loader's thread count, and the best of any depth measured.
at_threads = next((r for r in randoms if r.get("threads") == int(threads) and "iops" in r), None)
best = max((r for r in randoms if "iops" in r), key=lambda r: r["iops"], default=None)
def read_ahead_kb(path):  # the kernel's read-ahead for the files' device (buffered paths), if it has one
    st = os.stat(path)
    try:
        return int(open(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb").read())
    except (OSError, ValueError):
        return None
def share(r, limit):
    return r["gb_per_s"] / limit if "gb_per_s" in r and limit else None
report = {
    "bench": "loader",
    "host": socket.gethostname(),
    "device": device,
    "files": int(nfiles),
    "bytes": int(disk_bytes),
    "disk": {"method": "dd bs=64M " + ("iflag=direct" if direct == "true" else "buffered after POSIX_FADV_DONTNEED (no O_DIRECT here)"),
             "gb_per_s": disk, "gb_per_s_one_stream": one, "gb_per_s_stream_per_file": parallel,
             "read_ahead_kb": read_ahead_kb(first)},
    # window_gb_per_s: IOPS × window bytes, the token rate of one request per window at that depth.
    "disk_random": [{k: r.get(k) for k in ("threads", "request_bytes", "window_bytes", "iops", "gb_per_s",
                                           "window_gb_per_s", "latency_us", "method", "error") if k in r}
                    for r in randoms],
    "runs": runs,
    "summary": [{"io": r.get("io"), "order": r.get("order"), "gb_per_s": r.get("gb_per_s"),
                 "tokens_per_s": r.get("tokens_per_s"), "cpu_seconds_per_gb": r.get("cpu_seconds_per_gb"),
                 "share_of_disk": share(r, disk),
                 # shuffled: against random reads of one window at the loader's thread count, and at
                 # the deepest queue measured (what the read-ahead hints can use)
                 "share_of_random_reads": share(r, at_threads and at_threads["window_gb_per_s"]) if r.get("order") == "shuffled" else None,
                 "share_of_random_reads_best": share(r, best and best["window_gb_per_s"]) if r.get("order") == "shuffled" else None,
                 "hinted_runs": r.get("hinted_runs"),
                 "storage_gb_per_s": r.get("storage_gb_per_s"),
                 "page_cache_resident_before": r.get("page_cache", {}).get("resident_before"),
                 "error": r.get("error")} for r in runs],
}
groups = {}
for row in report["summary"]:
    if row["gb_per_s"] is not None:
        groups.setdefault((row["io"], row["order"]), []).append(row)
def median(xs):
    xs = sorted(x for x in xs if x is not None)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2 if xs else None
report["median"] = [{"io": io, "order": order, "runs": len(rows),
                     "gb_per_s": median(r["gb_per_s"] for r in rows),
                     "gb_per_s_all": [r["gb_per_s"] for r in rows],
                     "share_of_disk": median(r["share_of_disk"] for r in rows),
                     "share_of_random_reads": median(r["share_of_random_reads"] for r in rows)}
                    for (io, order), rows in groups.items()]
print(json.dumps(report, indent=2))
PY
