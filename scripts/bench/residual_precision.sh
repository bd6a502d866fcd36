#!/usr/bin/env bash
# train.residual_dtype against PyTorch on one GPU (docs/models.md "Residual stream precision"): a
# small model trained on real text from the same initial weights and the same batches by
#   tetra      train.residual_dtype bf16 and fp32 (bf16 precision), and fp32 precision (the check
#              that weights, batches and optimizer agree with the reference's fp32 run)
#   PyTorch    bf16 autocast (fp32 residual stream), autocast with the stream rounded to bf16,
#              and fp32 (scripts/bench/torch_residual_ref.py)
# then, per model, one JSON line per run: the loss after the same steps, its gap to PyTorch
# autocast, and the wall time to a common target loss (scripts/bench/residual_compare.py); the
# summary line names the train.residual_dtype (of tetra's bf16 runs) that reaches it soonest.
#   scripts/bench/residual_precision.sh [--json FILE] [gpt2|llama|both] [STEPS]
# The whole result (every model's lines, the GPU, the torch version, the commit) goes to FILE as one
# JSON object, or to $OUT/residual_precision.json when --json is not given and $OUT is a directory;
# the lines also go to stdout, logs and run directories to BENCH_DIR.
# gpt2: 6 layers, d 384, 6 heads; llama: the same with 2 KV heads, SwiGLU 1024,
# untied output layer. Byte-level text (vocabulary 256), batch 32 × 256, AdamW lr 1e-3 (20 warmup
# steps, cosine to 1e-4), weight decay 0.1, clipping at 1.0, shuffled windows (seed 1234), 400 steps.
# The text: /usr/share/common-licenses (every file but LGPL-3, as scripts/prepare_tiny_data.sh takes
# them); where that folder is missing (or with TEXT=python) the .py files of this Python's standard
# library. Offline: nothing is downloaded.
# Environment: TETRA (default build/tetra, built here with its CUDA backend when missing: only the
# tetra target), PYTHON (python3 with torch + CUDA), BENCH_DIR (runs/bench), TETRA_ARGS (extra --set
# overrides of every tetra run), DEVICE (cuda; cpu only to try the script itself: tetra's bf16 runs then
# fail and are listed as failed, PyTorch's autocast is the CPU's, and no times mean anything).
set -euo pipefail
cd "$(dirname "$0")/../.."
json=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --json) [ $# -ge 2 ] || { echo "--json needs a FILE" >&2; exit 2; }; json=$2; shift 2 ;;
    --json=*) json=${1#--json=}; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
which=${args[0]:-gpt2}
steps=${args[1]:-400}
case "$which" in
  gpt2|llama) archs=("$which") ;;
  both) archs=(gpt2 llama) ;;
  *) echo "unknown model '$which' (gpt2, llama or both)" >&2; exit 2 ;;
esac
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "STEPS must be a positive integer, got '$steps'" >&2; exit 2; }
warmup=$(( steps < 20 ? steps : 20 ))  # tetra takes at most train.steps warmup steps
if [ -z "$json" ] && [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then json=$OUT/residual_precision.json; fi
TETRA=${TETRA:-build/tetra}
PY=${PYTHON:-python3}
bench=${BENCH_DIR:-runs/bench}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
t0=$(date +%s)

if [ ! -x "$TETRA" ]; then  # only the binary: the tests are not needed here
  [ -f build/CMakeCache.txt ] || cmake -S . -B build $(command -v ninja >/dev/null && echo -G Ninja) \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}" -DTETRA_CUDA=ON \
    -DTETRA_PYTHON="$(command -v "$PY")" >&2
  cmake --build build --target tetra -j "$(nproc)" >&2
  TETRA=build/tetra
  echo "built $TETRA in $(( $(date +%s) - t0 )) s" >&2
fi
device=${DEVICE:-cuda}
[ "$device" = cpu ] || "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "PyTorch sees no GPU")'
text=${TEXT:-licences}
[ "$text" = licences ] && [ ! -d /usr/share/common-licenses ] && text=python

results=()
for arch in "${archs[@]}"; do
  out=$bench/residual-$arch
  rm -rf "$out/runs"
  mkdir -p "$out"
  case "$arch" in
    gpt2) ref_model=(--arch gpt2 --layers 6 --dim 384 --heads 6)
          yaml_model="{arch: gpt2, vocab_size: 256, seq_len: 256, d_model: 384, n_layers: 6, n_heads: 6, init_from: $out/init}" ;;
    llama) ref_model=(--arch llama --layers 6 --dim 384 --heads 6 --kv-heads 2 --ffn 1024)
           yaml_model="{arch: llama, vocab_size: 256, seq_len: 256, d_model: 384, n_layers: 6, n_heads: 6, n_kv_heads: 2, ffn_dim: 1024, init_from: $out/init}" ;;
  esac
  train_args=(--vocab 256 --seq 256 --batch 32 --steps "$steps" --lr 1e-3 --min-lr 1e-4 --warmup "$warmup" --wd 0.1
              --betas 0.9 0.95 --clip 1.0 --seed 1234 --data-seed 1234 --shuffle 1)

  "$PY" scripts/bench/torch_residual_ref.py data --out "$out" --text "$text" >&2
  "$PY" scripts/bench/torch_residual_ref.py init --out "$out/init" "${ref_model[@]}" "${train_args[@]}" >&2
  cat > "$out/config.yaml" <<EOF
run: {name: residual, output_dir: $out/runs, seed: 1234}
model: $yaml_model
train: {steps: $steps, global_batch: 32, micro_batch: 32, grad_clip: 1.0, device: $device}
optimizer: {lr: 1.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1, warmup_steps: $warmup, schedule: cosine, min_lr: 1.0e-4}
data: {train: $out/train.bin, shuffle: true}
checkpoint: {every: 0, resume: none}
log: {every: 100}
EOF

  tetra_runs=()
  failed=()
  run_tetra() {  # NAME PRECISION RESIDUAL_DTYPE
    local t=$(date +%s)
    if "$TETRA" train "$out/config.yaml" --set run.name="$1" --set train.precision="$2" \
         --set train.residual_dtype="$3" ${TETRA_ARGS:-} > "$out/$1.log" 2>&1; then
      tetra_runs+=(--tetra "$1=$out/runs/$1")
      echo "$arch $1: $(( $(date +%s) - t )) s" >&2
    else
      tail -30 "$out/$1.log" >&2
      failed+=("$1")
    fi
  }
  run_tetra tetra-bf16-residual bf16 bf16
  run_tetra tetra-fp32-residual bf16 fp32
  run_tetra tetra-fp32 fp32 fp32
  t=$(date +%s)
  "$PY" scripts/bench/torch_residual_ref.py train --init "$out/init" --data "$out/train.bin" "${ref_model[@]}" \
    "${train_args[@]}" --modes autocast,bf16_residual,fp32 --device "$device" > "$out/torch.jsonl"
  echo "$arch torch (3 modes): $(( $(date +%s) - t )) s" >&2
  fail_args=()
  for f in "${failed[@]+"${failed[@]}"}"; do fail_args+=(--failed "$f"); done
  "$PY" scripts/bench/residual_compare.py "${tetra_runs[@]+"${tetra_runs[@]}"}" "${fail_args[@]+"${fail_args[@]}"}" \
    --torch "$out/torch.jsonl" --baseline torch-autocast --choose tetra-bf16-residual --choose tetra-fp32-residual \
    --label "$arch" --json "$out/result.json"
  results+=("$out/result.json")
done

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
"$PY" - "$commit" "$(( $(date +%s) - t0 ))" "${json:-}" "${results[@]}" <<'EOF'
import json, os, sys
commit, seconds, path, parts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
doc = {"bench": "residual_precision", "commit": commit, "wall_s": seconds, "models": {}}
for p in parts:
    r = json.load(open(p))
    doc["models"][r["label"]] = r
    doc.setdefault("gpu", r.get("gpu")), doc.setdefault("torch", r.get("torch"))
print(json.dumps({"summary": True, "wall_s": seconds, "soonest_tetra": {k: v["summary"]["soonest_tetra"]
                  for k, v in doc["models"].items()}}))
if path:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(path + ".tmp", path)
    print(f"wrote {path}", file=sys.stderr)
EOF
