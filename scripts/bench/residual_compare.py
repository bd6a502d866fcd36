#!/usr/bin/env python3
"""Compares training runs of one model on the same batches from the same weights: tetra run
directories (metrics.jsonl: loss and step_ms of every step) and the JSON lines of
scripts/bench/torch_residual_ref.py (loss and cumulative wall time of every step). Prints one JSON
line per run and a summary line:

  final_loss            mean loss of the last --window steps
  gap_pct               its difference to the baseline run's, in % of the baseline's
  paired_gap_pct        mean over the last --tail steps of (loss − baseline loss) / baseline loss,
                        step by step (the batches are the same, so this cancels most batch noise)
  target_step, time_to_target_s
                        the first step whose --window-step running mean is ≤ the target loss, and
                        the wall time up to and including it (every step counted, the first ones too:
                        they include one-time start-up work such as GEMM autotuning)
  steady_time_to_target_s
                        target_step × ms_per_step_median: the time to the target at the steady
                        step rate, which the choice of the summary uses (a long run pays the
                        start-up once, the step rate every step)
  ms_per_step_median

The target loss is --target, or else the highest final_loss of all runs (so that every run
reaches it). The summary names the tetra run (of the --choose runs, if given) that reaches the
target soonest at its steady step rate. With --json, the
lines (and the GPU, the torch version, --label and the --failed runs) also go to FILE as one object.

usage: residual_compare.py --tetra LABEL=RUN_DIR ... --torch TORCH.jsonl [--baseline torch-autocast]
                           [--choose LABEL ...] [--label MODEL] [--failed LABEL ...] [--json FILE]"""
import argparse, json, os, statistics, sys


def tetra_run(label, run_dir):
    rows = [json.loads(l) for l in open(f"{run_dir}/metrics.jsonl")]
    rows = sorted((r for r in rows if "loss" in r and "step_ms" in r), key=lambda r: r["step"])
    if not rows:
        sys.exit(f"{run_dir}/metrics.jsonl holds no steps")
    cumulative, t = [], 0.0
    for r in rows:
        t += r["step_ms"]
        cumulative.append(t)
    return {"run": label, "losses": [r["loss"] for r in rows], "cumulative_ms": cumulative,
            "ms_per_step_median": statistics.median(r["step_ms"] for r in rows)}


def torch_runs(path):
    out = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("impl") == "torch":
                out.append({"run": f"torch-{r['mode']}", "losses": r["losses"], "cumulative_ms": r["cumulative_ms"],
                            "ms_per_step_median": r["ms_per_step_median"], "gpu": r.get("device_name"),
                            "torch": r.get("torch")})
    return out


def running_mean(xs, w):
    out, s = [], 0.0
    for i, x in enumerate(xs):
        s += x
        if i >= w:
            s -= xs[i - w]
        out.append(s / min(i + 1, w))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tetra", action="append", default=[], help="LABEL=RUN_DIR")
    p.add_argument("--torch", action="append", default=[], help="JSON lines of torch_residual_ref.py train")
    p.add_argument("--baseline", default="torch-autocast")
    p.add_argument("--window", type=int, default=20)
    p.add_argument("--tail", type=int, default=100)
    p.add_argument("--target", type=float, default=0.0)
    p.add_argument("--choose", action="append", default=[],
                   help="a run the summary may name as the soonest (default: every tetra run)")
    p.add_argument("--label", default="", help="the model compared, for --json")
    p.add_argument("--failed", action="append", default=[], help="a run that did not finish (listed in --json)")
    p.add_argument("--json", default="", help="also write everything to FILE as one JSON object")
    a = p.parse_args()
    runs = [tetra_run(*t.split("=", 1)) for t in a.tetra]
    for path in a.torch:
        runs += torch_runs(path)
    if not runs:
        sys.exit("no runs to compare")
    steps = min(len(r["losses"]) for r in runs)
    for r in runs:
        r["losses"], r["cumulative_ms"] = r["losses"][:steps], r["cumulative_ms"][:steps]
        r["final_loss"] = statistics.fmean(r["losses"][-a.window:])
    base = next((r for r in runs if r["run"] == a.baseline), runs[0])
    target = a.target if a.target > 0 else max(r["final_loss"] for r in runs)
    tail = min(a.tail, steps)
    for r in runs:
        smooth = running_mean(r["losses"], a.window)
        hit = next((i for i, v in enumerate(smooth) if v <= target and i + 1 >= a.window), None)
        paired = [(x - b) / b for x, b in zip(r["losses"][-tail:], base["losses"][-tail:])]
        r["line"] = {
            "run": r["run"], "steps": steps, "final_loss": round(r["final_loss"], 5),
            "gap_pct": round(100 * (r["final_loss"] - base["final_loss"]) / base["final_loss"], 3),
            "paired_gap_pct": round(100 * statistics.fmean(paired), 3),
            "target_loss": round(target, 5), "target_step": None if hit is None else hit + 1,
            "time_to_target_s": None if hit is None else round(r["cumulative_ms"][hit] / 1e3, 3),
            "steady_time_to_target_s": None if hit is None else round((hit + 1) * r["ms_per_step_median"] / 1e3, 3),
            "ms_per_step_median": round(r["ms_per_step_median"], 3),
            "loss_at": {str(s): round(r["losses"][s - 1], 5) for s in (1, 10, 50, 100, 200, 400) if s <= steps}}
        print(json.dumps(r["line"]), flush=True)
    candidates = a.choose or [r["run"] for r in runs if r["run"].startswith("tetra")]
    reached = [r for r in runs if r["run"] in candidates and r["line"]["steady_time_to_target_s"] is not None]
    best = min(reached, key=lambda r: r["line"]["steady_time_to_target_s"]) if reached else None
    summary = {"summary": True, "model": a.label or None, "baseline": base["run"], "target_loss": round(target, 5),
               "soonest_tetra": best["run"] if best else None, "failed": a.failed}
    print(json.dumps(summary), flush=True)
    if a.json:
        gpu = next((r["gpu"] for r in runs if r.get("gpu")), None)
        version = next((r["torch"] for r in runs if r.get("torch")), None)
        doc = {"label": a.label, "gpu": gpu, "torch": version, "runs": [r["line"] for r in runs], "summary": summary}
        with open(a.json + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
