#!/usr/bin/env bash
# The Hopper kernels' wgmma pipelines as ptxas builds them: compiles each *_sm90a.cu for sm_90a with
# ptxas' report (-Xptxas -v) and fails where ptxas says it serialised wgmma instructions or waits for
# them where the code does not (its "Potential Performance Loss" and "warpgroup.wait is injected"
# notes: C7514–C7518), or spills registers. Either leaves the kernels correct and quietly slower: a
# wgmma reading or writing registers on a path ptxas cannot follow (a conditional first issue, say)
# makes it wait for every group, so that the tensor cores idle while each one drains.
#   wgmma_pipelines.sh NVCC SOURCE_DIR FILE...
set -euo pipefail
nvcc=$1 root=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for f in "$@"; do
  log="$tmp/$(basename "$f").log"
  if ! "$nvcc" -x cu -std=c++20 -O3 -DNDEBUG -DTETRA_HAVE_SM90A=1 -I"$root" --expt-relaxed-constexpr \
      --generate-code=arch=compute_90a,code=sm_90a -Xptxas -v -c "$f" -o "$tmp/out.o" >"$log" 2>&1; then
    echo "FAIL $f: does not compile"; tail -20 "$log"; status=1; continue
  fi
  kernels=$(grep -c "Compiling entry function" "$log" || true)
  notes=$(grep -E "\(C751[4-8]\)|Potential Performance Loss|warpgroup.wait is injected" "$log" || true)
  spills=$(grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$log" || true)
  if [ "$kernels" -eq 0 ]; then
    echo "FAIL $f: ptxas compiled no kernel (is TETRA_HAVE_SM90A still what guards them?)"; status=1
  elif [ -n "$notes" ] || [ -n "$spills" ]; then
    echo "FAIL $f: of $kernels kernels, ptxas reports"
    printf '%s\n' "$notes" "$spills" | grep -v '^$' | sed -E 's/ptxas info *: //; s/Potential Performance Loss: wgmma.mma_async instructions are serialized due to/serialised by/; s/in (around )?line [0-9]+ //' |
      c++filt | sed -E 's/tetra::(cuda::)?(\(anonymous namespace\)::)?//g' | cut -c1-300 | sort | uniq -c | head -20
    status=1
  else
    echo "ok   $f: $kernels kernels, no serialised wgmma, no spills"
  fi
done
exit $status
