#!/usr/bin/env python3
"""`tetra plan` at tp 2 for every config in configs/: the weights, gradients and optimizer state a
device holds are at most 55% of the same run's at tp 1 (same dp and ZeRO stage; what stays whole on
every tp rank — norms, the row-parallel biases, positions — is the excess over 50%), every ZeRO
stage's row shrinks too, and the tensor-parallel communication is shown. A mixture-of-experts config
(model.moe.n_experts > 0) is refused at tp 2 with a config error naming parallel.tp and
model.moe.n_experts (its MoE blocks have no tensor-parallel form yet). llama-1b.yaml at tp 16, twice
its 8 key/value heads: each rank holds the one key/value head its 2 query heads read, replicated over 2
ranks, and the plan counts those rows in full on every rank that holds them. Needs no GPU.

usage: tp_plan.py TETRA_BIN SOURCE_DIR"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


tetra, source = sys.argv[1], sys.argv[2]
configs = sorted(glob.glob(os.path.join(source, "configs", "*.yaml")))
if not configs:
    fail("no configs in " + source)


# A config that starts from a Hugging Face folder (model.init_from) gets one holding Llama 3.2 1B's
# config.json: `tetra plan` reads only that file of the folder.
hub_dir = tempfile.mkdtemp(prefix="tetra_tp_plan_")
with open(os.path.join(hub_dir, "config.json"), "w") as f:
    json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 128256,
               "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
               "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
               "rope_theta": 500000.0, "tie_word_embeddings": True, "max_position_embeddings": 131072,
               "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}, f)


def run_plan(cfg, tp, *sets, pp=1):
    # One data-parallel rank in both, so the two differ by tensor parallelism alone.
    args = [tetra, "plan", cfg, "--world", str(tp * pp), "--set", f"parallel.tp={tp}", "--set", "parallel.dp=0"]
    with open(cfg) as f:
        text = f.read()
    if re.search(r"^\s+init_from:", text, re.M):
        args += ["--set", f"model.init_from={hub_dir}"]
    if re.search(r"^\s+sample_every:\s*[1-9]", text, re.M):  # samples need the whole model on rank 0
        args += ["--set", "log.sample_every=0"]
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def plan(cfg, tp):
    r = run_plan(cfg, tp)
    if r.returncode != 0:
        fail(f"tetra plan {cfg} at tp {tp} exited {r.returncode}: {r.stderr}")
    return r.stdout


def stage_rows(out):
    """zero stage -> parameters + gradients + optimizer (GiB) from the by-stage table."""
    rows = {}
    for m in re.finditer(r"^\s*\*?\s*stage (\d)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", out, re.M):
        rows[int(m.group(1))] = sum(float(m.group(k)) for k in (2, 3, 4))
    return rows


for cfg in configs:
    name = os.path.basename(cfg)
    with open(cfg) as f:
        text = f.read()
    moe = re.search(r"^\s+n_experts:\s*[1-9]", text, re.M) is not None
    if moe:
        # ep 1: one data-parallel rank leaves no expert-parallel group to carve; the config's own pp.
        pp = re.search(r"^\s+pp:\s*(\d+)", text, re.M)
        r = run_plan(cfg, 2, "parallel.ep=1", pp=int(pp.group(1)) if pp else 1)
        if r.returncode != 2 or "parallel.tp" not in r.stderr or "model.moe.n_experts" not in r.stderr:
            fail(f"{name}: a MoE config at tp 2 should be a config error (exit 2) naming parallel.tp and "
                 f"model.moe.n_experts; got exit {r.returncode}: {r.stderr}")
        print(f"ok: {name}: MoE at tp 2 refused as a config error")
        continue
    one, two = plan(cfg, 1), plan(cfg, 2)
    m = re.search(r"tensor parallel: tp 2 holds [\d.]+M of the parameters per device; weights \+ gradients \+ "
                  r"optimizer state [\d.]+ GiB = ([\d.]+)% of tp 1's", two)
    if not m:
        fail(f"{name}: tetra plan at tp 2 does not show the tensor-parallel memory:\n{two}")
    share = float(m.group(1))
    if share > 55.0:
        fail(f"{name}: at tp 2 a device holds {share}% of tp 1's weights, gradients and optimizer state")
    r1, r2 = stage_rows(one), stage_rows(two)
    if sorted(r1) != [0, 1, 2, 3] or sorted(r2) != [0, 1, 2, 3]:
        fail(f"{name}: the by-stage table is missing rows")
    # Rows printed to the MiB: compared where rounding is well below 5% (tiny.yaml's are not).
    ratios = [r2[s] / r1[s] for s in r1 if r1[s] >= 0.1]
    worst = max(ratios) if ratios else share / 100
    if worst > 0.55:
        fail(f"{name}: a ZeRO stage row at tp 2 holds {100 * worst:.1f}% of tp 1's")
    if "tensor-parallel communication per device" not in two or "all-gathers" not in two:
        fail(f"{name}: tetra plan at tp 2 does not show the tensor-parallel communication")
    if "tensor parallel:" in one:
        fail(f"{name}: tetra plan at tp 1 speaks of tensor parallelism")
    print(f"ok: {name}: tp 2 holds {share}% of tp 1's state per device (worst stage {100 * worst:.1f}%)")

# Replicated key/value heads: llama-1b (16 layers, d 2048, 32 query heads over 8 key/value heads of 64,
# MLP 8192, vocabulary 128256, untied) at tp 16.
L, C, D, F, V = 16, 2048, 64, 8192, 128256
out = plan(os.path.join(source, "configs", "llama-1b.yaml"), 16)
kv = L * 2 * D * C  # one key head and one value head of [64, 2048] a layer on every rank
m = re.search(r"tensor parallel: (\d+) of them in blocks held by (\d+) tp ranks each", out)
if not m or int(m.group(1)) != kv or int(m.group(2)) != 2:
    fail(f"llama-1b.yaml at tp 16: tetra plan should show {kv} parameters in blocks held by 2 tp ranks:\n{out}")
per_rank = 2 * V * C / 16 + C + L * (2 * C + 2 * D * C + kv / L + C * C / 16 + 3 * F * C / 16)
m = re.search(r"tensor parallel: tp 16 holds ([\d.]+)M of the parameters per device", out)
if not m or abs(float(m.group(1)) - per_rank / 1e6) > 0.051:
    fail(f"llama-1b.yaml at tp 16: a device holds {per_rank / 1e6:.2f}M parameters with its key/value heads "
         f"counted in full, tetra plan says {m.group(1) if m else '?'}M")
print(f"ok: llama-1b.yaml at tp 16: {kv} key/value parameters held by 2 ranks each, {per_rank / 1e6:.1f}M a device")
print("PASS")
