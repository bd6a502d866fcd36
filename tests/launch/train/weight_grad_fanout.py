#!/usr/bin/env python3
"""The blocks' weight-gradient GEMMs spread over side streams (TETRA_WGRAD_STREAMS, runtime/
stream_fanout.h) compute what one stream computes: each piece writes its own gradient buffer with the
same kernel on the same operands, so the per-step losses and gradient norms are equal bit for bit.

  --cpu  (any machine): a value outside 1..4 stops `tetra train` with a configuration error (exit 2)
         naming the variable; on the CPU backend 4 lanes run the pieces in order (the same losses).
  GPU:   GPT-2, Llama, a Llama with mixture-of-experts layers, and Llama and the MoE model under FP8
         tensorwise, at 4 streams (GPT-2 also at 2) against 1, eager and captured as CUDA graphs. GEMM
         autotuning is off (TETRA_GEMM_TUNE=0) so that the runs, separate processes, pick the same
         algorithms. Exits 77 (skipped) where no GPU is visible.

usage: weight_grad_fanout.py TETRA_BIN WORK_DIR [--cpu]"""
import os, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from script_util import ENV, licence_run_config, metrics_rows, require_gpus

tetra, work = sys.argv[1], sys.argv[2]
on_cpu = "--cpu" in sys.argv[3:]
if not on_cpu:
    require_gpus(1)
cfg = licence_run_config(tetra, work, """
model: {arch: gpt2, vocab_size: 256, seq_len: 64, d_model: 128, n_layers: 3, n_heads: 4}
train: {steps: 8, global_batch: 8, micro_batch: 2, grad_clip: 1.0}
optimizer: {lr: 2.0e-3, betas: [0.9, 0.95], weight_decay: 0.1, warmup_steps: 2, schedule: cosine, min_lr: 2.0e-4}
""")

LLAMA = ["model.arch=llama", "model.n_kv_heads=2", "model.ffn_dim=256"]
MOE = LLAMA + ["model.moe.n_experts=4", "model.moe.top_k=2", "model.moe.n_shared=1", "model.moe.ffn_dim=64",
               "model.moe.first_k_dense=1"]


def run(name, ways, sets, expect_rc=0):
    env = dict(ENV, TETRA_GEMM_TUNE="0", TETRA_WGRAD_STREAMS=str(ways))
    args = [tetra, "train", cfg, "--set", f"run.name={name}"] + [a for s in sets for a in ("--set", s)]
    r = subprocess.run(args, env=env, capture_output=True, text=True)
    if r.returncode != expect_rc:
        print(r.stdout[-3000:], r.stderr[-3000:])
        sys.exit(f"FAIL: {name} exited {r.returncode}, expected {expect_rc}")
    if expect_rc != 0:
        return r.stdout + r.stderr
    return [(r["loss"], r["grad_norm"]) for r in metrics_rows(os.path.join(work, "runs", name))]


ok = True


def same(what, got, want):
    global ok
    good = got == want and len(want) > 0
    print(f"{what}: {'the same' if good else 'DIFFERENT'} losses and gradient norms over {len(want)} steps")
    if not good:
        print("  want", want, "\n  got ", got)
    ok &= good


if on_cpu:
    cpu = ["train.device=cpu", "train.precision=fp32"]
    out = run("bad_ways", 5, cpu, expect_rc=2)
    good = "TETRA_WGRAD_STREAMS='5'" in out
    print(f"TETRA_WGRAD_STREAMS=5: exit 2, message names the variable: {'ok' if good else 'FAIL'}")
    ok &= good
    for arch, sets in [("gpt2", []), ("moe", MOE)]:
        same(f"cpu {arch}, 4 lanes vs 1", run(f"cpu_{arch}_4", 4, cpu + sets), run(f"cpu_{arch}_1", 1, cpu + sets))
    sys.exit(0 if ok else 1)

gpu = ["train.device=cuda", "train.precision=bf16"]
cases = [("gpt2", []), ("llama", LLAMA), ("moe", MOE), ("llama_fp8", LLAMA + ["train.fp8.recipe=tensorwise"]),
         ("moe_fp8", MOE + ["train.fp8.recipe=tensorwise"])]
for arch, sets in cases:
    for graphs in (False, True):
        mode = "graphs" if graphs else "eager"
        sets_g = gpu + sets + [f"train.cuda_graphs={'true' if graphs else 'false'}"]
        one = run(f"{arch}_{mode}_1", 1, sets_g)
        for ways in (2, 4) if arch == "gpt2" else (4,):  # two lanes: pieces share a lane (GPT-2's four)
            same(f"{arch} {mode}, {ways} streams vs 1", run(f"{arch}_{mode}_{ways}", ways, sets_g), one)
sys.exit(0 if ok else 1)
