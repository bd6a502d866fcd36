#!/usr/bin/env python3
"""`tetra plan` for pipelines (docs/pipeline.md): --print-schedule prints one JSON line
per pipeline rank in op syntax, --json one object whose "pipeline" holds the simulated step,
--costs and --trace work and bad costs are refused with exit code 2, the plain plan prints the
bubble and memory per stage, and 1,024 ranks at pp 16 are planned in under 20 s of CPU time for every schedule.

With the path of tetra_pipeline_costs, also measures a tiny model's stage costs on the CPU and
replays a schedule with them (--costs takes what the program prints).

usage: plan_pipeline.py TETRA_BIN WORK_DIR [TETRA_PIPELINE_COSTS_BIN]
"""
import json, os, re, resource, subprocess, sys

tetra, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
cfg = os.path.join(work, "cfg.yaml")
with open(cfg, "w") as f:
    f.write("""run: {name: plan, output_dir: runs}
model: {arch: gpt2, vocab_size: 50304, seq_len: 1024, d_model: 2048, n_layers: 32, n_heads: 16}
train: {steps: 10, global_batch: 64, micro_batch: 1}
""")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def plan(*args, world=4, expect=0):
    cmd = [tetra, "plan", cfg, "--world", str(world)] + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != expect:
        print(r.stdout, r.stderr)
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}, expected {expect}")
    return r


# --print-schedule: {"rank": r, "ops": [...]} per pipeline rank, keys in that order.
r = plan("--set", "parallel.pp=4", "--set", "parallel.schedule=1f1b", "--print-schedule")
lines = r.stdout.strip().splitlines()
check(len(lines) == 4, f"4 lines for pp 4, got {len(lines)}")
check(lines[0].startswith('{"rank":0,"ops":["F0.0",'), f"first line {lines[0][:40]}")
op = re.compile(r"^(F\d+\.\d+|B\d+\.\d+w?|W\d+\.\d+|FB\(F\d+\.\d+,B\d+\.\d+\))$")
for line in lines:
    row = json.loads(line)
    check(all(op.match(o) for o in row["ops"]), f"op syntax in {line[:60]}")
    # 1F1B with 64 micro-batches: every forward and backward once.
    check(len(row["ops"]) == 128, f"rank {row['rank']}: {len(row['ops'])} ops")
last = json.loads(lines[3])["ops"]
check(last[:4] == ["F0.0", "B0.0", "F0.1", "B0.1"], f"last rank starts {last[:4]}")

r = plan("--set", "parallel.pp=4", "--set", "parallel.schedule=dualpipev", "--print-schedule")
row0 = json.loads(r.stdout.splitlines()[0])
check(any(o.startswith("FB(") for o in row0["ops"]) and any(o.endswith("w") for o in row0["ops"]),
      "dualpipev has FB pairs and split backwards")

# --json with given costs: 1F1B's bubble is (pp − 1)(F + B).
r = plan("--set", "parallel.pp=4", "--set", "parallel.schedule=1f1b", "--json", "--costs", "F=1,B=2,W=1,P2P=0")
j = json.loads(r.stdout)
p = j["pipeline"]
check(list(j.keys()) == ["world", "mesh", "pipeline"], f"top-level keys {list(j.keys())}")
for key in ["schedule", "stages", "micro_batches", "makespan", "bubble", "bubble_fraction", "peak_activations"]:
    check(key in p, f"pipeline.{key} present")
check(p["schedule"] == "1f1b" and p["stages"] == 4 and p["micro_batches"] == 64, f"pipeline {p}")
check(abs(p["bubble"] - 3 * 3) < 1e-9, f"1f1b bubble {p['bubble']}")
check(abs(p["makespan"] - (64 + 3) * 3) < 1e-9, f"1f1b makespan {p['makespan']}")
check(p["peak_activations"] == [4, 3, 2, 1], f"1f1b peak activations {p['peak_activations']}")
check(abs(p["bubble_fraction"] - p["bubble"] / p["makespan"]) < 1e-12, "bubble_fraction")

# Without --costs, from the model's FLOPs: the split counts the LM head (2·d·V ≈ 8.6 blocks of
# 24·d² + 4·d·T here), so the last stage holds fewer layers.
r = plan("--set", "parallel.pp=4", "--set", "parallel.schedule=zb_h1", "--json")
p = json.loads(r.stdout)["pipeline"]
check(sum(p["stage_layers"]) == 32 and p["stage_layers"][-1] < p["stage_layers"][0], f"split {p['stage_layers']}")
check(p["costs_from"] == "model_flops", "costs from the model")
r = plan("--set", "parallel.pp=4", "--set", "parallel.stage_layers=[8, 8, 8, 8]", "--json")
check(json.loads(r.stdout)["pipeline"]["stage_layers"] == [8, 8, 8, 8], "parallel.stage_layers overrides")

# --trace writes a Chrome trace with every compute instruction.
trace = os.path.join(work, "trace.json")
plan("--set", "parallel.pp=2", "--set", "parallel.schedule=dualpipe", "--json", "--trace", trace, world=2)
with open(trace) as f:
    events = json.load(f)["traceEvents"]
check(sum(1 for e in events if e.get("cat") == "compute") > 0, "trace has compute events")

# Bad costs and option mixes stop with exit code 2 and say why.
r = plan("--set", "parallel.pp=4", "--json", "--costs", "F=1,B=1,W=2", expect=2)
check("W = 2 exceeds B = 1" in r.stderr, f"W > B error: {r.stderr.strip()}")
r = plan("--set", "parallel.pp=4", "--json", "--costs", "Q=1", expect=2)
check("Q: unknown key" in r.stderr, f"unknown key error: {r.stderr.strip()}")
r = plan("--set", "parallel.pp=4", "--json", "--print-schedule", expect=2)
check("choose one" in r.stderr, f"both forms: {r.stderr.strip()}")

# The plain plan: the bubble and each pipeline rank's memory.
r = plan("--set", "parallel.pp=4", "--set", "parallel.schedule=interleaved_1f1b")
check("pipeline: pp 4, schedule interleaved_1f1b, 8 stages" in r.stdout, "plain plan pipeline line")
check(re.search(r"bubble [0-9.e+-]+ \([0-9.]+%\)", r.stdout) is not None, "plain plan bubble")
check(len(re.findall(r"^\s+\d+\s+\d+,\d+\s", r.stdout, re.M)) == 4, "one row per pipeline rank with its two stages")

# 1,024 ranks at pp 16, every schedule: CPU time (user + system, not the clock, which a busy machine
# stretches), under 20 s each: a fraction of a second here, so a machine 20× slower passes, while a
# plan that grows with the square of the world takes minutes.
for s in ["gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "dualpipe", "dualpipev"]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = plan("--set", "parallel.pp=16", "--set", f"parallel.schedule={s}", "--set", "train.global_batch=4096",
             world=1024)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    dt = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(f"plan for 1024 ranks, pp 16, {s}: {dt:.2f} s of CPU time")
    check(dt < 20.0, f"{s}: {dt:.2f} s of CPU time for 1024 ranks")
    check(len(re.findall(r"^rank \d+: pp ", r.stdout, re.M)) == 1024, f"{s}: every rank's groups")

# Measured costs: per stage, in the --costs syntax, accepted by the simulator.
if len(sys.argv) > 3:
    tiny = os.path.join(work, "tiny.yaml")
    with open(tiny, "w") as f:
        f.write("""run: {name: costs, output_dir: runs}
model: {arch: gpt2, vocab_size: 256, seq_len: 32, d_model: 32, n_layers: 4, n_heads: 2}
parallel: {pp: 2, schedule: dualpipev}
train: {steps: 1, global_batch: 4, micro_batch: 1, device: cpu}
""")
    r = subprocess.run([sys.argv[3], tiny, "--reps", "3"], capture_output=True, text=True)
    check(r.returncode == 0, f"tetra_pipeline_costs runs: {r.stderr.strip()}")
    m = json.loads(r.stdout)
    check(m["stages"] == 4 and len(m["F_ms"]) == 4 and all(x > 0 for x in m["F_ms"] + m["B_ms"] + m["W_ms"]),
          f"four stages measured: {m}")
    check(re.match(r"^F=[0-9.e-]+(:[0-9.e-]+){3},B=", m["costs"]) is not None, f"--costs syntax: {m['costs']}")
    r = subprocess.run([tetra, "plan", tiny, "--world", "2", "--json", "--costs", m["costs"]], capture_output=True,
                       text=True)
    check(r.returncode == 0 and json.loads(r.stdout)["pipeline"]["costs_from"] == "given",
          f"tetra plan replays dualpipev with them: {r.stderr.strip()}")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("ok")
