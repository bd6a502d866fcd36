#!/usr/bin/env python3
"""`tetra plan configs/deepseek-v3.yaml --world 2048` (DeepSeek-V3's layout: pp 16 DualPipe × dp 128
with ep 64 inside dp, ZeRO-1) answers in under 20 s of CPU time, and its numbers match a hand computation:
- parameters: 672.1B in all, 38.7B active per token (DeepSeek publishes 671B and 37B with MLA
  attention; tetra's grouped-query attention has 18.4M more parameters a layer: configs/deepseek-v3.yaml);
- the largest pipeline rank's weights (bf16) and optimizer state (fp32 master and two moments, the
  dense part sharded over dp 128, the experts over their expert-data group of 2) to 0.01%;
- DualPipe: pp + 1 = 17 micro-batches of activations held at the peak, and a bubble above zero and
  at most DeepSeek's (pp/2 − 1)(F&B + B − 3W) for the costs the plan prints.

usage: plan_deepseek_v3.py TETRA_BIN SOURCE_DIR"""
import json
import os
import re
import resource
import subprocess
import sys


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg, flush=True)


tetra, source = sys.argv[1], sys.argv[2]
cfg = os.path.join(source, "configs", "deepseek-v3.yaml")
WORLD, PP, EP = 2048, 16, 64
DP = WORLD // PP
# The shape in configs/deepseek-v3.yaml.
L, DENSE, D, V, F_DENSE, E, F_EXPERT, TOP_K, SHARED = 61, 3, 7168, 129280, 18432, 256, 2048, 8, 1


def run(*extra):
    """tetra plan's stdout and the CPU time (user + system) it took: what the plan costs, whatever
    else the machine is doing."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([tetra, "plan", cfg, "--world", str(WORLD)] + list(extra), capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    took = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if r.returncode != 0:
        fail(f"tetra plan {cfg} --world {WORLD} {' '.join(extra)} exited {r.returncode}: {r.stderr[-3000:]}")
    return r.stdout, took


out, took = run()
# CPU time, not the clock: about 0.3 s here; 20 s leaves a slower or busier machine 50× (a plan that
# grows with the square of the world, 2,048 ranks, takes minutes).
check(took < 20.0, f"tetra plan --world {WORLD} answers in {took:.2f} s of CPU time (< 20 s)")
check(f"mesh: world {WORLD} = pp {PP} × dp {DP} × tp 1 (ep {EP} inside dp)" in out, "the mesh is pp 16 × dp 128, ep 64")

# Parameters, by hand (weights [out, in]; norms are d each; the router's bias is a buffer).
attn = 4 * D * D                      # q, k, v, o: 128 heads of 56 = d, 128 key/value heads
norms = 2 * D                         # input and post-attention RMSNorm
swiglu = lambda f: 3 * D * f          # gate, up, down
dense_layer = attn + norms + swiglu(F_DENSE)
expert = swiglu(F_EXPERT)
moe_common = attn + norms + E * D + SHARED * expert   # + the router's gate and the shared expert
moe_layer = moe_common + E * expert
outer = 2 * V * D + D                 # embedding, output layer, final norm
total = outer + DENSE * dense_layer + (L - DENSE) * moe_layer
active = outer + DENSE * dense_layer + (L - DENSE) * (moe_common + TOP_K * expert)
m = re.search(r"([\d.]+)M parameters \(([\d.]+)M active per token\)", out)
check(m is not None, "the plan prints the parameters and the active ones")
got_total, got_active = float(m.group(1)) * 1e6, float(m.group(2)) * 1e6
check(abs(got_total - total) / total < 1e-6 and abs(got_active - active) / active < 1e-6,
      f"parameters {got_total / 1e9:.1f}B, active {got_active / 1e9:.1f}B: the hand computation's "
      f"{total / 1e9:.1f}B and {active / 1e9:.1f}B")
check(660e9 < total < 680e9 and 35e9 < active < 40e9, "near DeepSeek-V3's published 671B and 37B")

# The largest pipeline rank's weights and optimizer state. DualPipe: rank r holds stages r and pp-1-r.
js = json.loads(run("--json")[0])["pipeline"]
split = js["stage_layers"]
check(len(split) == PP and sum(split) == L, f"the 61 layers split into 16 stages: {split}")
m = re.search(r"memory of pipeline rank (\d+), the largest", out)
check(m is not None, "the plan says which pipeline rank it shows")
big = int(m.group(1))
first = [sum(split[:s]) for s in range(PP)]
layers = [i for s in (big, PP - 1 - big) for i in range(first[s], first[s] + split[s])]
check(all(i >= DENSE for i in layers) and big not in (0, PP - 1),
      f"pipeline rank {big} holds MoE layers {layers} only (no embedding or output layer)")
n_dense = len(layers) * (moe_common)           # replicated over dp: ZeRO-1 shards it over 128
n_expert = len(layers) * (E // EP) * expert    # 4 experts a rank: sharded over the expert-data group of 2
m = re.search(r"persistent state\s+\d+ B\s+[\d.]+ GiB\s+= [\d.]+ B × N = [\d.]+ B × N / dp \(N = (\d+)\)", out)
check(m is not None and int(m.group(1)) == n_dense + n_expert,
      f"pipeline rank {big} holds N = {n_dense + n_expert} parameters (the plan: {m.group(1) if m else None})")


def row(name):
    m = re.search(rf"^  {name}\s+(\d+) B\s+([\d.]+) GiB", out, re.M)
    check(m is not None, f"the plan prints {name} per device")
    return int(m.group(1))


weights, optim = row("parameters"), row("optimizer state")
want_w, want_o = 2 * (n_dense + n_expert), 12 * (n_dense / DP + n_expert / (DP // EP))
check(abs(weights - want_w) / want_w < 1e-4, f"bf16 weights {weights / 2**30:.3f} GiB = 2 B × N")
check(abs(optim - want_o) / want_o < 1e-4,
      f"optimizer state {optim / 2**30:.3f} GiB = 12 B × (dense / 128 + experts / 2) = {want_o / 2**30:.3f} GiB")
acts, total_mem = row("activations"), row("total")
check(0 < acts < total_mem, f"activations {acts / 2**30:.1f} GiB of {total_mem / 2**30:.1f} GiB a GPU")

# DualPipe: pp + 1 micro-batches held at the peak; the bubble against DeepSeek's table.
check(js["schedule"] == "dualpipe" and js["micro_batches"] == 15360 // DP,
      f"DualPipe with {js['micro_batches']} micro-batches a step (15360 / dp 128)")
check(set(js["peak_activations"]) == {PP + 1}, f"every rank holds pp + 1 = {PP + 1} micro-batches at the peak")
costs = {k: [float(x) for x in v.split(":")] for k, v in (kv.split("=") for kv in js["costs"].split(","))}
f_, b_, w_ = (max(costs[k]) for k in "FBW")
fb = max(costs["FB"]) if "FB" in costs else f_ + b_
bound = (PP // 2 - 1) * (fb + b_ - 3 * w_)
check(0 < js["bubble"] <= bound,
      f"the bubble {js['bubble']:.2f} ({100 * js['bubble_fraction']:.1f}% of the step) is above 0 and at most "
      f"(pp/2 - 1)(F&B + B - 3W) = {bound:.2f}")
check(re.search(r"simulated step: makespan [\d.]+, bubble [\d.]+ \([\d.]+%\)", out) is not None,
      "the plan prints the simulated bubble")
print("PASS")
