#!/usr/bin/env bash
# scripts/bench/fp8_throughput.sh with stand-ins: a `tetra` that writes a run directory whose steps take
# 100 ms in bf16, 80 ms with train.fp8.recipe=tensorwise and 90 ms with blockwise (and fails for the
# recipe named in FAKE_FAIL), and a peer that reports 100,000 tokens/s in bf16 and 130,000 with --fp8
# tensorwise. Checks every run's line and the summary's ratios, a failed run, bad arguments.
# usage: fp8_throughput_script.sh WORK_DIR
set -euo pipefail
source "$(dirname "$0")/stand_in.sh"
stand_in_tetra <<'SH'
recipe=${set[train.fp8.recipe]:-none}
[ "$recipe" != "${FAKE_FAIL:-}" ] || { echo "fake-tetra: failing $recipe as asked"; exit 1; }
case "$recipe" in none) ms=100 ;; tensorwise) ms=80 ;; blockwise) ms=90 ;; *) exit 3 ;; esac
SH
cat > "$work/peer.py" <<'PY'
import argparse, json
p = argparse.ArgumentParser(); p.add_argument("--fp8", default="none"); a, _ = p.parse_known_args()
print("compiling...")
print(json.dumps({"impl": "fake-peer-" + a.fp8, "tokens_per_s": 130000 if a.fp8 == "tensorwise" else 100000}))
PY
touch "$work/bench/random_tokens_llama3.h5"  # the data file exists: no random tokens made

# 1. All runs: 3 tetra lines, 2 peer lines, the summary.
RECIPES="tensorwise blockwise" PEER="$work/peer.py" bash "$src/scripts/bench/fp8_throughput.sh" llama1b 20 > "$work/out.txt" || fail "exit $?"
"$py" - "$work/out.txt" <<'PY' || fail "the lines of a full call"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l.get("impl") for l in lines[:5]] == ["tetra-llama1b-bf16", "tetra-llama1b-fp8-tensorwise",
    "tetra-llama1b-fp8-blockwise", "fake-peer-none", "fake-peer-tensorwise"], lines
assert [l["ms_per_step"] for l in lines[:3]] == [100, 80, 90], lines[:3]
assert all(l["device"] == "Fake GPU" for l in lines[:3]), lines[:3]
s = lines[5]
assert s["summary"] and s["shape"] == "llama1b" and s["failed"] == [], s
assert s["devices"] == ["Fake GPU"], s
assert s["tetra-fp8-tensorwise_over_tetra-bf16"] == 1.25 and s["tetra-fp8-blockwise_over_tetra-bf16"] == 1.111, s
assert s["peer-fp8-tensorwise_over_peer-bf16"] == 1.3 and s["tetra-bf16_over_peer-bf16"] == 1.638, s
assert s["tetra-fp8-tensorwise_over_peer-fp8-tensorwise"] == round(204800 / 130000, 3), s
print("ok: a full call")
PY

# 2. A failed run: its error line, the others still run, failed listed, exit 1.
rc=0
FAKE_FAIL=blockwise RECIPES="tensorwise blockwise" PEER=none bash "$src/scripts/bench/fp8_throughput.sh" llama1b 20 \
  > "$work/fail.txt" 2> "$work/fail.err" || rc=$?
[ "$rc" = 1 ] || fail "a failed run: exit $rc, not 1"
grep -q "failing blockwise as asked" "$work/fail.err" || fail "the failed run's log tail is not on stderr"
"$py" - "$work/fail.txt" <<'PY' || fail "the lines of a call with a failed run"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 4 and lines[2] == {"impl": "tetra-llama1b-fp8-blockwise", "error": True}, lines
s = lines[3]
assert s["failed"] == ["tetra-fp8-blockwise"] and s["tetra-fp8-blockwise_over_tetra-bf16"] is None, s
assert s["tetra-fp8-tensorwise_over_tetra-bf16"] == 1.25 and "tetra-bf16_over_peer-bf16" not in s, s
print("ok: a failed run")
PY

# 3. PEER_RUNS=fp8: the peer's float8 run only.
RECIPES=tensorwise PEER="$work/peer.py" PEER_RUNS=fp8 bash "$src/scripts/bench/fp8_throughput.sh" llama1b 20 \
  > "$work/fp8only.txt" || fail "PEER_RUNS=fp8: exit $?"
"$py" - "$work/fp8only.txt" <<'PY' || fail "the lines of a call with the peer's float8 run only"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l.get("impl") for l in lines[:3]] == ["tetra-llama1b-bf16", "tetra-llama1b-fp8-tensorwise",
    "fake-peer-tensorwise"] and lines[3]["summary"], lines
print("ok: the peer's float8 run only")
PY

# 4. Bad arguments: exit 2 before anything runs.
for args in "llama7b" "llama1b x" "llama1b 0"; do
  rc=0; bash "$src/scripts/bench/fp8_throughput.sh" $args > /dev/null 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "arguments '$args': exit $rc, not 2"
done
rc=0; RECIPES=delayed bash "$src/scripts/bench/fp8_throughput.sh" llama1b > /dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "RECIPES=delayed: exit $rc, not 2"
rc=0; PEER_RUNS=eager bash "$src/scripts/bench/fp8_throughput.sh" llama1b > /dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "PEER_RUNS=eager: exit $rc, not 2"
rc=0; PEER="$work/missing.py" bash "$src/scripts/bench/fp8_throughput.sh" llama1b > /dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "a missing PEER: exit $rc, not 2"
echo "ok: bad arguments refused"
