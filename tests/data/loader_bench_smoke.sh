#!/usr/bin/env bash
# The loader benchmark on small shards with the posix path (the CPU machine's): it prints one JSON
# line per run whose numbers add up, and the page cache of the files was dropped before reading;
# the random-read mode reads whole 4 KiB-aligned requests of one window and reports its rates.
set -euo pipefail
bench=$1
py=${TETRA_PYTHON:-/usr/bin/python3}
src=${TETRA_SOURCE_DIR:?}
dir=$(mktemp -d "$PWD/loader_bench_smoke.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$py" "$src/scripts/bench/make_token_shards.py" "$dir/tok" 3000000 50257 3 > /dev/null
for order in sequential shuffled; do
  "$bench" --files "$dir/tok_*.bin" --io posix --device cpu --seq-len 256 --micro-batch 8 --threads 2 \
    --prefetch 4 --order "$order" > "$dir/$order.json"
done
"$bench" --random-read --files "$dir/tok_*.bin" --seq-len 256 --threads 2 --seconds 0.5 --max-gb 0.01 > "$dir/random.json"
"$py" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
windows = 3 * ((1000000 - 1) // 256)           # 3 shards of 1e6 tokens, T = 256
units = windows // 8
for order in ("sequential", "shuffled"):
    r = json.load(open(f"{d}/{order}.json"))
    def check(cond, what):
        if not cond:
            sys.exit(f"loader_bench_smoke ({order}): {what}: {json.dumps(r)}")
    check(r["io"] == "posix" and r["order"] == order, "path or order")
    check(r["micro_batches"] == units, f"micro-batches {r['micro_batches']} != {units}")
    check(r["tokens"] == units * 8 * 256, "tokens")
    check(r["token_bytes"] == units * 8 * 257 * 2, "token bytes")
    check(r["gb_per_s"] > 0 and r["tokens_per_s"] > 0 and r["seconds"] > 0, "rates")
    check(abs(r["gb_per_s"] - r["token_bytes"] / 1e9 / r["seconds"]) < 1e-9 * max(1, r["gb_per_s"]), "GB/s")
    check(r["cpu_seconds_per_gb"] > 0, "CPU time")
    check(r["page_cache"]["dropped"] and 0 <= r["page_cache"]["resident_before"] < 0.05, "page cache not dropped")
    check(r["storage_read_bytes"] == -1 or r["storage_read_bytes"] >= 0, "storage bytes")
    if order == "sequential":
        # One read per micro-batch, plus shard boundaries and the micro-batches read ahead.
        check(r["reads"] <= units + 4 + 3, "adjacent windows should be read with one call")
        check(r["hinted_runs"] <= 2 * 4, "only units that cross a shard boundary are hinted")
    else:
        check(r["reads"] > 7 * units, "shuffled windows are mostly not adjacent")
        check(r["hinted_runs"] == r["reads"], "every run of a shuffled unit is hinted")
r = json.load(open(f"{d}/random.json"))
def check(cond, what):
    if not cond:
        sys.exit(f"loader_bench_smoke (random reads): {what}: {json.dumps(r)}")
check(r["mode"] == "random_read" and r["threads"] == 2 and r["files"] == 3, "mode, threads, files")
check(r["window_bytes"] == 257 * 2 and r["request_bytes"] == 4096, "request of one window rounded up to 4 KiB")
check(0 < r["reads"] <= 10**7 // 4096 + 2 and r["bytes"] == r["reads"] * 4096, "bounded by --max-gb")
check(abs(r["iops"] - r["reads"] / r["seconds"]) < 1e-6 * r["iops"], "IOPS")
check(abs(r["window_gb_per_s"] - r["iops"] * 514 / 1e9) < 1e-9 * max(1, r["iops"]), "window rate")
check(r["latency_us"]["p50"] <= r["latency_us"]["p99"], "latency")
print("loader_bench_smoke: ok")
PY
