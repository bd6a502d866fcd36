#!/usr/bin/env python3
"""Writes a synthetic run directory of a long job, as `tetra train` leaves it: metrics.jsonl (one
line per step execution), goodput.jsonl (the ledger) and config.yaml. Three attempts: the first
crashes 500 steps after its last checkpoint, the second is preempted, the third finishes; some steps
are skipped as non-finite, evaluations come every `eval_every` steps, and the metrics carry
exposed communication per mesh axis, data wait and pipeline bubble.

usage: synthetic_run.py RUN_DIR STEPS [--no-ledger-steps]
  --no-ledger-steps: the ledger holds attempts, checkpoints and evaluations but no step events
  (for timing the metrics side alone)."""
import math
import os
import random
import sys


def main():
    run_dir, steps = sys.argv[1], int(sys.argv[2])
    ledger_steps = "--no-ledger-steps" not in sys.argv[3:]
    os.makedirs(run_dir, exist_ok=True)
    rng = random.Random(7)
    every = max(1, steps // 1000)  # checkpoints
    eval_every = max(1, steps // 100)
    crash_at = (steps * 2 // 5) // every * every + every // 2  # attempt 1 dies mid-interval
    preempt_at = (steps * 7 // 10) // every * every             # attempt 2 saves and stops here
    attempts = [(1, 1, crash_at, None), (2, crash_at - every // 2 + 1, preempt_at, "preempted"),
                (3, preempt_at + 1, steps, "finished")]
    if crash_at - every // 2 < 1:
        sys.exit("synthetic_run.py: STEPS must be at least 10")
    skipped = {steps // 3 + 17, steps // 2 + 5, steps * 9 // 10}
    tokens_per_step = 524288
    t = 1714557600.0
    metrics, ledger = [], []
    m_append, l_append = metrics.append, ledger.append
    tokens = 0
    for attempt, first, last, reason in attempts:
        l_append('{"attempt":%d,"event":"attempt_start","host":"gpu-node-%03d","pid":%d,"time":%.3f,"world_size":64}'
                 % (attempt, 17 + attempt, 4000 + attempt, t))
        t += 60.0
        l_append('{"attempt":%d,"device_kind":"NVIDIA H100 80GB HBM3","devices":64,"event":"run_info",'
                 '"flops_per_token":7.8e9,"peak_flops_per_device":9.89e14,"precision":"bf16","time":%.3f,'
                 '"tokens_per_step":%d}' % (attempt, t, tokens_per_step))
        if first > 1:
            l_append('{"attempt":%d,"end":%.3f,"event":"ckpt_load","start":%.3f,"step":%d}'
                     % (attempt, t + 20.0, t, first - 1))
            t += 20.0
        tokens = (first - 1) * tokens_per_step
        for s in range(first, last + 1):
            dur = 0.18 + 0.02 * rng.random()
            start = t
            t += dur
            tokens += tokens_per_step
            comm_dp = 4.0 + 2.0 * rng.random()
            comm_tp = 1.0 + rng.random()
            data = 0.3 * rng.random() + (25.0 if s % 5000 == 0 else 0.0)
            bubble = 6.0 + rng.random()
            if ledger_steps:
                l_append('{"attempt":%d,"bubble":%.5f,"data_wait":%.5f,"end":%.4f,"event":"step","exposed_comm":%.5f,'
                         '"host_overhead":0.001,"optimizer":0.004,"recompute":0.0,"start":%.4f,"step":%d,"tokens":%d}'
                         % (attempt, bubble / 1e3, data / 1e3, t, (comm_dp + comm_tp) / 1e3, start, s, tokens_per_step))
            loss = 2.2 + 8.5 * math.exp(-s / (steps / 20)) + 0.05 * rng.random()
            lr = 3e-4 * min(1.0, s / 2000) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / steps)))
            extra = ""
            if s in skipped:
                loss_text, extra = "null", ',"skipped":true'
            else:
                loss_text = "%.5f" % loss
            if s % eval_every == 0:
                e0 = t
                t += 5.0
                l_append('{"attempt":%d,"end":%.3f,"event":"eval","start":%.3f,"step":%d}' % (attempt, t, e0, s))
                extra += ',"val_loss":%.5f' % (loss + 0.08)
            m_append('{"attempt":%d,"data_wait_ms":%.4f,"bubble_ms":%.4f,"exposed_comm_ms":%.4f,'
                     '"exposed_comm_ms_dp":%.4f,"exposed_comm_ms_tp":%.4f,"grad_norm":%.5f,"loss":%s,"lr":%.6g,'
                     '"mem_peak_gib":61.25,"step":%d,"step_ms":%.3f,"time":%.3f,"tokens":%d,"tokens_per_s":%.1f%s}'
                     % (attempt, data, bubble, comm_dp + comm_tp, comm_dp, comm_tp,
                        0.3 + 0.2 * rng.random() + (4.0 if s < 50 else 0.0), loss_text, lr, s, dur * 1e3, t,
                        tokens, tokens_per_step / dur, extra))
            if s % every == 0 or s == steps:
                c0 = t
                t += 2.5
                l_append('{"async":false,"attempt":%d,"end":%.3f,"event":"ckpt_save","start":%.3f,"step":%d}'
                         % (attempt, t, c0, s))
        if reason:
            l_append('{"attempt":%d,"event":"attempt_end","exit_code":%d,"reason":"%s","time":%.3f}'
                     % (attempt, 0 if reason == "finished" else 143, reason, t + 1.0))
        t += 240.0  # idle between attempts
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        f.write("\n".join(metrics) + "\n")
    with open(os.path.join(run_dir, "goodput.jsonl"), "w") as f:
        f.write("\n".join(ledger) + "\n")
    with open(os.path.join(run_dir, "config.yaml"), "w") as f:
        f.write("run:\n  name: synthetic\n  output_dir: runs\n  seed: 1\n  comm_timeout_s: 600\n"
                "model:\n  arch: gpt2\n  vocab_size: 50304\n  seq_len: 1024\n  d_model: 768\n  n_layers: 12\n"
                "  n_heads: 12\n"
                "parallel:\n  dp: 16\n  tp: 4\n  pp: 1\n  ep: 1\n  zero_stage: 1\n"
                "train:\n  steps: %d\n  global_batch: 512\n  micro_batch: 8\n  device: cuda\n  precision: bf16\n"
                "  eval_every: %d\n" % (steps, eval_every))


if __name__ == "__main__":
    main()
