#!/usr/bin/env bash
# scripts/bench/step_levers.sh with stand-ins: a `tetra` whose steps take 100 − 5·TETRA_WGRAD_STREAMS
# − 3·(2 − TETRA_NORM_BACKWARD_STAGES) ms (and that fails at the number of streams in FAKE_FAIL),
# and a peer that reports fixed figures. Checks every run's line and tag, a subset, the peer's
# line, a failed run (exit 1) and bad arguments (exit 2).
# usage: step_levers_script.sh WORK_DIR
set -euo pipefail
source "$(dirname "$0")/stand_in.sh"
stand_in_tetra <<'SH'
ways=${TETRA_WGRAD_STREAMS:?} stages=${TETRA_NORM_BACKWARD_STAGES:?}
[ "$ways" != "${FAKE_FAIL:-}" ] || { echo "fake-tetra: failing at $ways streams as asked"; exit 1; }
ms=$((100 - 5 * ways - 3 * (2 - stages)))
SH
cat > "$work/peer.py" <<'PY'
import argparse, json
p = argparse.ArgumentParser(); p.add_argument("--mode"); p.add_argument("--layers", type=int); a, _ = p.parse_known_args()
print("compiling...")
print(json.dumps({"impl": f"fake-peer-{a.mode}-{a.layers}", "tokens_per_s": 100000}))
PY
touch "$work/bench/random_tokens.h5"  # the data file exists: no random tokens made

# 1. Every pair, then the peer: six tetra lines in order with their step times, the peer's line.
PEER="$work/peer.py" bash "$src/scripts/bench/step_levers.sh" 124m 12 > "$work/out.txt" || fail "exit $?"
"$py" - "$work/out.txt" <<'PY' || fail "the lines of a full call"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
want = [(w, s) for s in (2, 1) for w in (1, 2, 4)]
assert [l["impl"] for l in lines[:6]] == [f"tetra-124m-1gpu-w{w}s{s}" for w, s in want], lines
assert [l["ms_per_step"] for l in lines[:6]] == [100 - 5 * w - 3 * (2 - s) for w, s in want], lines
assert lines[6] == {"impl": "fake-peer-compile-12", "tokens_per_s": 100000} and len(lines) == 7, lines
print("ok: every pair and the peer")
PY

# 2. A subset; a failed run: its error line, the others still run, exit 1.
rc=0
FAKE_FAIL=2 WAYS="1 2 4" STAGES=1 bash "$src/scripts/bench/step_levers.sh" 124m 12 > "$work/fail.txt" 2> "$work/fail.err" || rc=$?
[ "$rc" = 1 ] || fail "a failed run: exit $rc, not 1"
grep -q "failing at 2 streams as asked" "$work/fail.err" || fail "the failed run's log tail is not on stderr"
"$py" - "$work/fail.txt" <<'PY' || fail "the lines of a call with a failed run"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["impl"] for l in lines] == ["tetra-124m-1gpu-w1s1", "tetra-124m-1gpu-w2s1", "tetra-124m-1gpu-w4s1"], lines
assert lines[1].get("error") is True and lines[2]["ms_per_step"] == 77, lines
print("ok: a subset with a failed run")
PY

# 3. Bad arguments: exit 2 before anything runs.
for args in "7b" "124m x" "124m 0"; do
  rc=0; bash "$src/scripts/bench/step_levers.sh" $args > /dev/null 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "arguments '$args': exit $rc, not 2"
done
for env in WAYS=8 WAYS=two STAGES=3 PEER="$work/missing.py"; do
  rc=0; env "$env" bash "$src/scripts/bench/step_levers.sh" 124m > /dev/null 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "$env: exit $rc, not 2"
done
echo "ok: bad arguments refused"
