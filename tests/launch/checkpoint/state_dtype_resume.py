#!/usr/bin/env python3
"""optimizer.state_dtype across a resume. Checkpoints hold AdamW's moments in fp32 whatever the run
keeps them in, so a run resumes under either setting (2 ranks, ZeRO-1, the tiny GPT-2 of
tests/tetra_runs.py):

- bf16 -> bf16: a bf16-state run resumed from its own step-4 checkpoint is the uninterrupted bf16
  run bit for bit (losses and the final checkpoint): the moments widen exactly on save and round
  back to the same bf16 values on load;
- its checkpoints hold fp32 moments that bf16 represents exactly (the low 16 bits of every value
  zero): the run kept them in bf16 and the file format did not change;
- fp32 -> bf16: resumed from an fp32-state checkpoint, the step after the resume has the fp32
  run's loss exactly (the fp32 master weights load unchanged), a warning names the changed key,
  and the later losses follow the fp32 run within LOSS_TOL;
- bf16 -> fp32: back again from the bf16 run's step-8 checkpoint, likewise;
- expert parallelism (a Llama of MoE layers, ep 2 over dp 2, ZeRO-1): the dense and the expert
  optimizers both keep bf16 moments (every parameter's saved moments bf16 values, not all zero),
  and a resume under bf16 is again the uninterrupted run bit for bit.

LOSS_TOL: bf16 moments change each update's direction by up to about one bf16 rounding (2^-9
relative) of m and v; measured here, the resumed runs' losses differ from the run they continue
under the other setting by at most 3.4e-6 (fp32 -> bf16, 8 steps) and 8.7e-7 (bf16 -> fp32, 4
steps), and the uninterrupted bf16- and fp32-state runs by 6.4e-6 over 12 steps. 1e-4 is ~15x the
worst. The exact checks (bit for bit, the first resumed step) carry the test; this one bounds the
rest.

usage: state_dtype_resume.py TETRA_BIN WORK_DIR"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, compare_states, losses, state_of  # noqa: E402

LOSS_TOL = 1e-4
ws = Workspace(sys.argv[1], sys.argv[2], steps=12, every=4)
stage = "parallel.zero_stage=1"
f32, b16 = "optimizer.state_dtype=fp32", "optimizer.state_dtype=bf16"


def ckpt(run, step):
    return os.path.join(ws.run_dir(run), "checkpoints", f"step_{step}")


def worst_loss_gap(run, ref, first, last):
    got, want = losses(ws.run_dir(run)), losses(ws.run_dir(ref))
    check(sorted(got) == list(range(first, last + 1)), f"{run} ran steps {first}..{last}")
    return max(abs(got[s] - want[s]) / abs(want[s]) for s in range(first, last + 1))


ws.train("fp32", 2, [stage, f32])
ws.train("bf16", 2, [stage, b16])

# bf16 -> bf16: bit for bit.
ws.train("bf16_resumed", 2, [stage, b16, f"checkpoint.resume={ckpt('bf16', 4)}"])
got, want = losses(ws.run_dir("bf16_resumed")), losses(ws.run_dir("bf16"))
check(all(got[s] == want[s] for s in range(5, 13)), "bf16 state resumed under bf16: the same losses, bit for bit")
worst, n = compare_states(ckpt("bf16_resumed", 12), ckpt("bf16", 12))
check(worst == 0.0, f"and the same final state, bit for bit ({n} parameters)")

# The moments on disk: fp32 datasets holding bf16 values.
_, state = state_of(ckpt("bf16", 12))
low_bits = sum(int(np.count_nonzero(state[p][k].view(np.uint32) & 0xFFFF)) for p in state for k in ("exp_avg", "exp_avg_sq"))
check(low_bits == 0, "a bf16-state checkpoint holds fp32 moments that bf16 represents exactly")
_, state32 = state_of(ckpt("fp32", 12))
low_bits32 = sum(int(np.count_nonzero(state32[p]["exp_avg_sq"].view(np.uint32) & 0xFFFF)) for p in state32)
check(low_bits32 > 0, "an fp32-state checkpoint's moments use the full fp32 precision")

# fp32 -> bf16.
out, _, _ = ws.train("to_bf16", 2, [stage, b16, "checkpoint.every=4", f"checkpoint.resume={ckpt('fp32', 4)}"])
check("optimizer.state_dtype was fp32 when step 4 was saved, now bf16" in out, "the resume warns of the change")
check(losses(ws.run_dir("to_bf16"))[5] == losses(ws.run_dir("fp32"))[5],
      "fp32 -> bf16: the first resumed step has the fp32 run's loss (the master weights loaded exactly)")
gap = worst_loss_gap("to_bf16", "fp32", 5, 12)
check(gap <= LOSS_TOL, f"fp32 -> bf16: losses within {LOSS_TOL} of the fp32 run (worst {gap:.1e})")

# bf16 -> fp32, from the checkpoint the resumed bf16 run wrote.
ws.train("to_fp32", 2, [stage, f32, f"checkpoint.resume={ckpt('to_bf16', 8)}"])
check(losses(ws.run_dir("to_fp32"))[9] == losses(ws.run_dir("to_bf16"))[9],
      "bf16 -> fp32: the first resumed step has the bf16 run's loss")
gap = worst_loss_gap("to_fp32", "to_bf16", 9, 12)
check(gap <= LOSS_TOL, f"bf16 -> fp32: losses within {LOSS_TOL} of the bf16 run (worst {gap:.1e})")
gap = worst_loss_gap("bf16", "fp32", 1, 12)
print(f"bf16 against fp32 state, uninterrupted: worst loss gap {gap:.1e}")

# Expert parallelism: the expert-data optimizer honours the setting too.
moe = ["model.arch=llama", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_dim=64", "model.moe.n_experts=4",
       "model.moe.top_k=2", "model.moe.ffn_dim=16", "parallel.ep=2", stage, b16]
ws.train("moe_bf16", 2, moe)
_, state = state_of(ckpt("moe_bf16", 12))
experts = [p for p in state if "experts" in p]
check(len(experts) > 0, f"the MoE checkpoint holds expert parameters ({len(experts)})")
bad = [f"{p} {k}" for p in state for k in ("exp_avg", "exp_avg_sq")
       if np.count_nonzero(state[p][k].view(np.uint32) & 0xFFFF) or (p in experts and not np.any(state[p][k]))]
check(not bad, f"dense and expert moments kept in bf16 (not: {', '.join(bad)})")
ws.train("moe_bf16_resumed", 2, moe + [f"checkpoint.resume={ckpt('moe_bf16', 4)}"])
got, want = losses(ws.run_dir("moe_bf16_resumed")), losses(ws.run_dir("moe_bf16"))
check(all(got[s] == want[s] for s in range(5, 13)), "MoE with bf16 state resumed under bf16: the same losses, bit for bit")
worst, n = compare_states(ckpt("moe_bf16_resumed", 12), ckpt("moe_bf16", 12))
check(worst == 0.0, f"and the same final state, bit for bit ({n} parameters)")
print("PASS")
