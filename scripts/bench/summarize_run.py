#!/usr/bin/env python3
"""One JSON line summarising a tetra run directory for benchmarks: median step time after
warm-up, tokens/s over all GPUs, MFU (of 989 TFLOP/s, as the PyTorch peer reports it), exposed
communication per step, peak device memory, the device it ran on (the run header's, so that figures
from different cards are not compared by mistake); for a mixture of experts also the busiest expert's
load over the mean in the last step, the largest over the MoE layers (as the PyTorch peer reports it).
usage: summarize_run.py RUN_DIR LABEL WORLD [WARMUP_STEPS]"""
import json, statistics, sys

run, label, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
warm = int(sys.argv[4]) if len(sys.argv) > 4 else 10
steps = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
steps = [s for s in steps if "step_ms" in s]
timed = steps[warm:] if len(steps) > warm + 3 else steps[len(steps) // 2:]
ms = statistics.median(s["step_ms"] for s in timed)
info = next(json.loads(l) for l in open(f"{run}/goodput.jsonl") if '"run_info"' in l)
tokens_per_step = info["tokens_per_step"]
tok_s = tokens_per_step / (ms / 1e3)
mfu = info["flops_per_token"] * tok_s / world / 989e12
exposed = statistics.median(s.get("exposed_comm_ms", 0.0) for s in timed)
loads = [v for k, v in steps[-1].items() if k.startswith("moe_load_max_over_mean_")]
moe = {"max_load_over_mean": round(max(loads), 3)} if loads else {}
print(json.dumps({
    "impl": label, "world": world, "tokens_per_step": tokens_per_step, "ms_per_step": round(ms, 2),
    "tokens_per_s": round(tok_s), "mfu_vs_989": round(mfu, 4), "exposed_comm_ms": round(exposed, 3),
    "exposed_comm_pct": round(100 * exposed / ms, 2), "loss": round(steps[-1]["loss"], 4),
    "mem_gib": max((s.get("mem_peak_gib", 0) for s in steps), default=0), "device": info.get("device_kind", ""),
    **moe}), flush=True)
