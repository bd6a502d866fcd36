#!/usr/bin/env python3
"""The routed experts' weight gradients add up over every micro-batch of a step, whatever runs them
(docs/moe.md "Weight gradients"): the step's first write into a zeroed gradient buffer stores, every
later one adds (Param::grad_empty). Through `tetra train` on CPU ranks under mpirun (fp32), a Llama
with MoE layers (8 experts, top 2 of 2-of-4 groups, a shared expert, a dense first layer, the
balance loss, a bias update that moves routing within the run).

The oracle is the same global batch as ONE micro-batch on one rank, ONE step per process (each
step resumes the previous one's checkpoint): each gradient is written once into a buffer the
process has just allocated as zeros, so nothing depends on accumulation nor on how a step prepares
its gradient buffers (the experts' are not zeroed, docs/moe.md). Against it, the uninterrupted run
of that layout (stale gradients of an earlier step must not leak into a later one) and every split
of the step into several micro-batches — several writes into the same gradient buffer — must give
the same losses and gradient norms within 1e-6 and final weights within 1e-5 (rounding of a
different summation order; optimizer.eps 1e-3: the equivalence tests' scheme, tests/tetra_runs.py):
  1 rank   2 and 4 micro-batches, ZeRO 0 and 2; the two-micro-batch interleave (moe_overlap);
           recomputation of the MLPs
  dp 2     ep 1 and 2 (4 and 2 micro-batches a rank), ZeRO 0, 1, 2 and 3
  pp 2     zb_h1 (W split from B and run later: the first micro-batch's W need not be the first to
           reach the layer), dualpipev (a rank runs each of its layers for 8 micro-batches in
           interleaved order), at dp 1 and at dp 2 × ep 2
A weight gradient written instead of added at a second micro-batch (or a second pipeline visit)
keeps one micro-batch's share of the gradient: the step-1 gradient norm alone moves by far more.
The routing (each MoE layer's max/mean expert load, every step) must be the oracle's exactly.

usage: moe_accumulation.py TETRA_BIN WORK_DIR"""
import os
import sys
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import (EQUIVALENCE_EPS, EQUIVALENCE_TOL as TOL, EQUIVALENCE_WEIGHTS_TOL as WTOL,  # noqa: E402
                        Workspace, check, metrics, state_of, weights_difference)

tetra, work = sys.argv[1], sys.argv[2]
STEPS = 3
MOE = ["model.arch=llama", "model.n_layers=4", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_dim=64",
       "model.moe.n_experts=8", "model.moe.top_k=2", "model.moe.n_shared=1", "model.moe.ffn_dim=16",
       "model.moe.first_k_dense=1", "model.moe.n_group=4", "model.moe.topk_group=2", "model.moe.route_scale=1.5",
       "model.moe.aux_loss_coef=0.01", "model.moe.bias_update_rate=0.01", EQUIVALENCE_EPS,
       "train.global_batch=8"]
ws = Workspace(tetra, work, steps=STEPS, every=STEPS, base_sets=MOE)


def layout(dp=1, pp=1, ep=1, zero=0, micro=2, schedule="1f1b"):
    return [f"parallel.dp={dp}", f"parallel.pp={pp}", f"parallel.ep={ep}", f"parallel.zero_stage={zero}",
            f"train.micro_batch={micro}", f"parallel.schedule={schedule}"]


def loads(run):
    return {s: {k: v for k, v in m.items() if k.startswith("moe_load_max_over_mean_")}
            for s, m in metrics(ws.run_dir(run)).items()}


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def final_state(run):
    _, s = state_of(os.path.join(ws.run_dir(run), "checkpoints", f"step_{STEPS}"))
    return s


t_start = time.time()
# The oracle: one micro-batch of 8 sequences, one step per process: each process resumes the last
# one's checkpoint and stops after its first step (SIGTERM: checkpoint written, exit 75 — preempted).
PREEMPTED = 75  # launch/job/signals.h exit_code::kPreempted
base, base_loads = {}, {}
for step in range(1, STEPS + 1):
    resume = [f"checkpoint.resume={os.path.join(ws.run_dir(f'oracle{step - 1}'), 'checkpoints', f'step_{step - 1}')}"] \
        if step > 1 else []
    ws.train(f"oracle{step}", np_=1, sets=layout(micro=8) + ["checkpoint.every=1"] + resume,
             fault=f"term@{step}", expect=PREEMPTED if step < STEPS else 0)
    m = metrics(ws.run_dir(f"oracle{step}"))
    check(sorted(m) == [step], f"oracle step {step}: one step in its own process")
    base.update(m)
    base_loads.update(loads(f"oracle{step}"))
_, base_state = state_of(os.path.join(ws.run_dir(f"oracle{STEPS}"), "checkpoints", f"step_{STEPS}"))
check(len(base_loads[1]) == 3, "the oracle logs its 3 MoE layers' loads")
experts = [n for n in base_state if ".mlp.experts." in n]
check(len(experts) == 3 * 2, f"the oracle's checkpoint holds the 3 MoE layers' fused expert weights ({experts})")

VARIANTS = [  # name, ranks, layout; micro-batches per rank and step = 8 / (dp · micro)
    ("one", 1, layout(micro=8)),
    ("one_z2", 1, layout(micro=8, zero=2)),
    ("mb2_z0", 1, layout(micro=4)),
    ("mb4_z0", 1, layout(micro=2)),
    ("mb4_z2", 1, layout(micro=2, zero=2)),
    ("mb2_overlap_z2", 1, layout(micro=4, zero=2) + ["parallel.moe_overlap=true"]),
    ("mb4_recompute_mlp", 1, layout(micro=2) + ["train.recompute=mlp"]),
    ("dp2_ep1_mb4_z2", 2, layout(dp=2, micro=1, zero=2)),
    ("dp2_ep2_mb2_z0", 2, layout(dp=2, ep=2, micro=2, zero=0)),
    ("dp2_ep2_mb4_z1", 2, layout(dp=2, ep=2, micro=1, zero=1)),
    ("dp2_ep2_mb4_z3", 2, layout(dp=2, ep=2, micro=1, zero=3)),
    ("pp2_zbh1_mb4_z0", 2, layout(pp=2, micro=2, zero=0, schedule="zb_h1")),
    ("pp2_dualpipev_mb8_z2", 2, layout(pp=2, micro=1, zero=2, schedule="dualpipev")),
    ("dp2_ep2_pp2_zbh1_mb4_z2", 4, layout(dp=2, pp=2, ep=2, micro=1, zero=2, schedule="zb_h1")),
    ("dp2_ep2_pp2_dualpipev_mb4_z1", 4, layout(dp=2, pp=2, ep=2, micro=1, zero=1, schedule="dualpipev")),
]
failed = []
for name, ranks, sets in VARIANTS:
    t0 = time.time()
    ws.train(name, np_=ranks, sets=sets, timeout=300)
    got = metrics(ws.run_dir(name))
    check(sorted(got) == list(range(1, STEPS + 1)), f"{name}: every step logged")
    same_routing = loads(name) == base_loads
    loss = max(rel(got[s]["loss"], base[s]["loss"]) for s in base)
    norm = max(rel(got[s]["grad_norm"], base[s]["grad_norm"]) for s in base)
    state = final_state(name)
    check(state.keys() == base_state.keys(), f"{name}: the final checkpoint holds the oracle's {len(base_state)} tensors")
    weights = weights_difference(state, base_state)
    ok = same_routing and max(loss, norm) <= TOL and weights <= WTOL
    print(f"{name}: routing {'equal' if same_routing else 'DIFFERS'}, loss {loss:.1e}, grad norm {norm:.1e} "
          f"(step 1: {rel(got[1]['grad_norm'], base[1]['grad_norm']):.1e}), weights {weights:.1e} (norm-wise) "
          f"{'ok' if ok else 'FAIL'} ({time.time() - t0:.1f} s)", flush=True)
    if not ok:
        failed.append(name)
check(not failed, f"every split of the step into micro-batches, ranks and pipeline visits equals one micro-batch "
      f"within {TOL} (weights {WTOL}; failed: {failed}; {time.time() - t_start:.0f} s in all)")
print("PASS")
