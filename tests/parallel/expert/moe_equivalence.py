#!/usr/bin/env python3
"""Mixture of experts across the mesh, through `tetra train` under mpirun (CPU, fp32): a Llama with
MoE layers (8 experts, top 2 of 2-of-4 groups, a shared expert, a dense first layer, the balance
loss, a bias update rate that moves routing within the run).

1. Expert parallelism and ZeRO reproduce the single-rank run: at dp 4 (4 CPU ranks), ep in {1, 2, 4}
   x ZeRO stage in {0, 1, 3}, every step's loss within 1e-6 (relative) of the 1-rank run's, each
   MoE layer's max/mean expert load equal (the same routing), the final weights within 1e-5 and
   moments within 1e-3 (norm-wise per tensor), router biases equal (optimizer.eps 1e-3 and the
   limits: the equivalence tests' scheme, tests/tetra_runs.py).
   With ep > 1 metrics.jsonl gives each step's exposed expert-parallel communication.
2. The two-micro-batch overlap (parallel.moe_overlap) changes the order of work, not the results:
   on and off give the same losses and the same final state bit for bit, at 1 rank and at dp 4 x
   ep 2 (ZeRO-1).
3. Checkpoints reshard across ep: a run at ep 2 saves step_4; a run at ep 4 loads it and saves what it
   loaded (its step 5 is made non-finite: on_nonfinite stop saves the state untouched), and so does
   one at ep 1 from that: the three hold the same state bit for bit and `tetra ckpt consolidate`
   writes the same Hugging Face-named tensors (each expert's, each router's bias) from each.
4. model.moe.force_balance balances every layer exactly.
5. `tetra plan` gives each ep rank its share of the experts and counts active parameters.

usage: moe_equivalence.py TETRA_BIN WORK_DIR [--quick]   (--quick: a covering subset of part 1)"""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import (EQUIVALENCE_EPS, EQUIVALENCE_TOL as TOL, EQUIVALENCE_WEIGHTS_TOL as WTOL,  # noqa: E402
                        Workspace, check, compare_states, metrics, state_of)

NONFINITE_EXIT = 3  # launch/job/signals.h exit_code::kNonFinite

tetra, work = sys.argv[1], sys.argv[2]
quick = "--quick" in sys.argv[3:]
MOE = ["model.arch=llama", "model.n_layers=4", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_dim=64", "model.moe.n_experts=8",
       "model.moe.top_k=2", "model.moe.n_shared=1", "model.moe.ffn_dim=16", "model.moe.first_k_dense=1",
       "model.moe.n_group=4", "model.moe.topk_group=2", "model.moe.route_scale=1.5",
       "model.moe.aux_loss_coef=0.01", "model.moe.bias_update_rate=0.01", EQUIVALENCE_EPS]
ws = Workspace(tetra, work, steps=8, every=4, base_sets=MOE)


def step_dir(run, step):
    return os.path.join(ws.run_dir(run), "checkpoints", f"step_{step}")


def loads_of(run):
    return {s: {k: v for k, v in m.items() if k.startswith("moe_load_max_over_mean_")}
            for s, m in metrics(ws.run_dir(run)).items()}


def compare_runs(ref, run, what, bitwise=False):
    mr, mg = metrics(ws.run_dir(ref)), metrics(ws.run_dir(run))
    check(sorted(mg) == sorted(mr) == list(range(1, 9)), f"{what}: 8 steps")
    if bitwise:
        check(all(mg[s]["loss"] == mr[s]["loss"] and mg[s]["grad_norm"] == mr[s]["grad_norm"] for s in mr),
              f"{what}: every step's loss and gradient norm equal bit for bit")
    else:
        worst = max(abs(mg[s]["loss"] - mr[s]["loss"]) / abs(mr[s]["loss"]) for s in mr)
        check(worst <= TOL, f"{what}: losses within {TOL} of the 1-rank run (worst {worst:.1e})")
    check(loads_of(run) == loads_of(ref) and len(loads_of(ref)[1]) == 3,
          f"{what}: the same max/mean expert loads in all 3 MoE layers at every step (the same routing)")
    if bitwise:
        worst, n = compare_states(step_dir(ref, 8), step_dir(run, 8))
        check(worst == 0.0, f"{what}: final state of {n} tensors bit for bit")
        return
    # Norm-wise per tensor: rounding of a near-zero gradient moves single elements relatively far.
    _, a = state_of(step_dir(ref, 8))
    _, b = state_of(step_dir(run, 8))
    check(a.keys() == b.keys(), f"{what}: the same {len(a)} tensors in the final checkpoint")
    worst = {k: max(float(np.linalg.norm(b[n][k] - a[n][k]) / max(np.linalg.norm(a[n][k]), 1e-30)) for n in a)
             for k in ("master", "exp_avg", "exp_avg_sq")}
    check(worst["master"] <= WTOL and worst["exp_avg"] <= 1e-3 and worst["exp_avg_sq"] <= 1e-3,
          f"{what}: final weights within {WTOL} and moments within 1e-3, norm-wise per tensor (worst "
          f"{worst['master']:.1e}, {worst['exp_avg']:.1e}, {worst['exp_avg_sq']:.1e}); router biases equal"
          if all(np.array_equal(a[n]["master"], b[n]["master"]) for n in a if n.endswith("correction_bias"))
          else f"{what}: router biases differ")


# The single-rank reference (4 micro-batches of 2 sequences), and the same with the overlap.
ws.train("ref", 1, ["parallel.dp=1"])
ref_loads = loads_of("ref")
check(any(v > 1.0 for m in ref_loads.values() for v in m.values()), "the reference routes unevenly at times")
_, ref_state = state_of(step_dir("ref", 8))
biases = [n for n in ref_state if n.endswith("e_score_correction_bias")]
check(len(biases) == 3 and all(np.abs(ref_state[n]["master"]).max() > 0 for n in biases),
      "the 3 MoE layers' router biases moved and are in the checkpoint")
ws.train("ref_overlap", 1, ["parallel.dp=1", "parallel.moe_overlap=true"])
compare_runs("ref", "ref_overlap", "1 rank, overlap on vs off", bitwise=True)

# model.moe.force_balance (a benchmark aid): token t to experts (t·k + j) mod E, so every expert of
# every layer gets the same load (64 tokens × 2 slots per micro-batch over 8 experts), and the run
# says that it is not training.
out, _, _ = ws.train("balanced", 1, ["parallel.dp=1", "model.moe.force_balance=true"])
check("benchmark aid" in out and all(v == 1.0 for m in loads_of("balanced").values() for v in m.values()) and
      len(loads_of("balanced")) == 8, "force_balance: max/mean load 1 in every layer at every step, announced as a "
      "benchmark aid")

# dp 4: micro-batches of 1 sequence, 2 per step on each rank.
mesh = [(1, 0), (1, 3), (2, 0), (2, 1), (2, 3), (4, 0), (4, 1), (4, 3)] if quick else \
       [(ep, z) for ep in (1, 2, 4) for z in (0, 1, 3)]
for ep, zero in mesh:
    name = f"ep{ep}_zero{zero}"
    out, _, _ = ws.train(name, 4, ["parallel.dp=4", "train.micro_batch=1", f"parallel.ep={ep}",
                                   f"parallel.zero_stage={zero}"], timeout=300)
    compare_runs("ref", name, f"dp 4 ep {ep} ZeRO-{zero}")
    if ep > 1:
        rows = metrics(ws.run_dir(name)).values()
        check(all(0 <= r["exposed_comm_ms_ep"] and abs(r["exposed_comm_ms_ep"] + r["exposed_comm_ms_dp"] -
                                                         r["exposed_comm_ms"]) <= 1e-6 * r["exposed_comm_ms"] + 1e-9
                  and "exposed_comm_ms_expert_dp" not in r for r in rows),
              f"dp 4 ep {ep} ZeRO-{zero}: every step splits its exposed communication into the expert-parallel "
              "exchanges' (exposed_comm_ms_ep) and dp's")

ws.train("ep2_zero1_overlap", 4, ["parallel.dp=4", "train.micro_batch=1", "parallel.ep=2", "parallel.zero_stage=1",
                                  "parallel.moe_overlap=true"], timeout=300)
compare_runs("ep2_zero1", "ep2_zero1_overlap", "dp 4 ep 2 ZeRO-1, overlap on vs off", bitwise=True)


def reload_at(run, ep, source):
    """Resumes `source` at dp 4 x ep (4 ranks) and stops before its first update: saves what it loaded."""
    fault = ",".join(f"nan@5:rank={r}" for r in range(4))
    out, _, _ = ws.train(run, 4, ["parallel.dp=4", "train.micro_batch=1", f"parallel.ep={ep}",
                                  "train.on_nonfinite=stop", f"checkpoint.resume={source}"],
                         fault=fault, expect=NONFINITE_EXIT, timeout=300)
    return out


def consolidated(run, step):
    out = os.path.join(ws.work, f"{run}_step{step}.h5")
    ws.tetra_cmd("ckpt", "consolidate", step_dir(run, step), "--out", out)
    with h5py.File(out, "r") as f:
        return {n: f[n][()] for n in f.keys()}


out = reload_at("reload_ep4", 4, step_dir("ep2_zero0", 4))
check("resharded" in out, "the ep 4 run says it resharded the ep 2 checkpoint")
reload_at("reload_ep1", 1, step_dir("reload_ep4", 4))
for a, b in (("ep2_zero0", "reload_ep4"), ("reload_ep4", "reload_ep1")):
    worst, n = compare_states(step_dir(a, 4), step_dir(b, 4))
    check(worst == 0.0, f"{a} -> {b}: master, exp_avg, exp_avg_sq of all {n} tensors equal bit for bit")
c2, c4, c1 = consolidated("ep2_zero0", 4), consolidated("reload_ep4", 4), consolidated("reload_ep1", 4)
check("model.layers.1.mlp.experts.7.down_proj.weight" in c2 and "model.layers.3.mlp.gate.e_score_correction_bias" in c2,
      "the consolidated file holds each expert's and each router bias's Hugging Face name")
same = all(c2.keys() == c.keys() and all(c2[k].tobytes() == c[k].tobytes() and c2[k].shape == c[k].shape for k in c2)
           for c in (c4, c1))
check(same, f"tetra ckpt consolidate writes the same {len(c2)} tensors, bit for bit, from ep 2, 4 and 1")


# tetra plan: the experts' slices per rank, the state per device shrinking with ep (N: the
# parameters a rank holds), active parameters for the FLOPs.
def plan(ep):
    args = ["plan", ws.cfg, "--world", "4"]
    for o in MOE + ["parallel.dp=4", "train.micro_batch=1", f"parallel.ep={ep}"]:
        args += ["--set", o]
    out, _, _ = ws.tetra_cmd(*args)
    held = int(out.split("(N = ")[1].split(")")[0])
    return out, held


out1, n1 = plan(1)
out4, n4 = plan(4)
check("experts: 8 per MoE layer, 2 on each rank of an expert-parallel group of 4" in out4 and
      "expert-data groups of 1 ranks" in out4, "tetra plan gives each of the 4 ep ranks 2 of the 8 experts")
check("active per token" in out1, "tetra plan counts the active parameters")
_, ref_state = state_of(step_dir("ref", 8))
experts = sum(v["master"].size for n, v in ref_state.items() if ".experts." in n)
check(n1 - n4 == experts * 3 // 4, f"per rank, ep 4 holds a quarter of the {experts} expert weights ({n1} -> {n4})")
print("PASS")
