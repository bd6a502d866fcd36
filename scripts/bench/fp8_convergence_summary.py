#!/usr/bin/env python3
"""The verdict of scripts/bench/fp8_convergence.sh from its runs' RUN_DIR/metrics.jsonl (standard
library only), as one JSON document on stdout, and the loss curves as an SVG file.

  fp8_convergence_summary.py RUNS_DIR --recipes "bf16 tensorwise blockwise" --seeds "1 2 3"
                             --steps 1000 [--last 200] [--svg OUT.svg]

Runs are RUNS_DIR/RECIPE-seedSEED. Per run: the mean loss of the last LAST steps, the steps
completed, the non-finite losses (written as null by tetra) and skipped updates. Per recipe: the
mean over its seeds; bf16's seed spread is max − min of its per-seed means. Each other recipe's
mean is compared with bf16's: `diff` (recipe − bf16), `rel_diff` (over bf16's mean),
`within_bf16_spread` (|diff| ≤ bf16's spread, the acceptance test) and `within_bf16_range` (the
recipe's mean between bf16's lowest and highest per-seed mean, the stricter reading). `converged`
is true when every FP8 recipe is within bf16's spread and no run has a non-finite loss.
Exit 0 with every run complete (STEPS steps logged), 1 when one is missing or short (reported as
`incomplete`; the JSON and SVG still written from what there is), 2 for bad arguments."""
import argparse, json, math, os, sys

COLOURS = {"bf16": "#1f4e9c", "tensorwise": "#d9541e", "blockwise": "#2a8a3e", "bf16-state": "#7b3fa0"}
EXTRA = ["#8e44ad", "#b8860b", "#17a2b8"]
DASHES = ["", "6,3", "2,2", "8,3,2,3"]


def read_losses(path):
    """{step: loss or None} from metrics.jsonl, the last line of each step (a restart repeats steps)."""
    losses = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            row = json.loads(line)
            if "step" in row and "loss" in row:
                loss = row["loss"]
                losses[int(row["step"])] = loss if isinstance(loss, (int, float)) and math.isfinite(loss) else None
    return losses


def run_stats(losses, steps, last):
    finite = [losses[s] for s in sorted(losses) if s > steps - last and losses[s] is not None]
    return {"steps_logged": len(losses), "last_step": max(losses, default=0),
            "nonfinite": sum(1 for v in losses.values() if v is None),
            "mean_last": sum(finite) / len(finite) if finite else None}


def summarize(runs_dir, recipes, seeds, steps, last):
    out = {"steps": steps, "last": last, "seeds": seeds, "recipes": {}, "incomplete": []}
    curves = {}
    for recipe in recipes:
        per_seed, nonfinite = {}, {}
        for seed in seeds:
            name = f"{recipe}-seed{seed}"
            path = os.path.join(runs_dir, name, "metrics.jsonl")
            losses = read_losses(path) if os.path.exists(path) else {}
            stats = run_stats(losses, steps, last)
            if stats["last_step"] < steps:
                out["incomplete"].append({"run": name, "last_step": stats["last_step"]})
            curves[(recipe, seed)] = losses
            per_seed[seed] = stats["mean_last"]
            nonfinite[seed] = stats["nonfinite"]
        means = [v for v in per_seed.values() if v is not None]
        out["recipes"][recipe] = {
            "mean_last_per_seed": {s: round6(v) for s, v in per_seed.items()},
            "mean": round6(sum(means) / len(means)) if means else None,
            "seed_spread": round6(max(means) - min(means)) if means else None,
            "nonfinite_losses": nonfinite}
    compare(out)
    return out, curves


def compare(out):
    base = out["recipes"].get("bf16")
    fp8 = [r for r in out["recipes"] if r != "bf16"]
    ok = all(v == 0 for r in out["recipes"].values() for v in r["nonfinite_losses"].values())
    if base is None or base["mean"] is None:
        out["converged"] = None if fp8 else ok
        return
    out["bf16_spread"] = base["seed_spread"]
    lows = [v for v in base["mean_last_per_seed"].values() if v is not None]
    for recipe in fp8:
        r = out["recipes"][recipe]
        if r["mean"] is None:
            r["within_bf16_spread"] = r["within_bf16_range"] = False
            ok = False
            continue
        diff = r["mean"] - base["mean"]
        r["diff"], r["rel_diff"] = round6(diff), round6(diff / base["mean"])
        r["within_bf16_spread"] = abs(diff) <= base["seed_spread"]
        r["within_bf16_range"] = min(lows) <= r["mean"] <= max(lows)
        ok = ok and r["within_bf16_spread"]
    out["converged"] = ok


def round6(v):
    return None if v is None else round(v, 6)


def smooth(losses, window):
    """[(step, mean of the finite losses of the last `window` steps)], None where a loss is not finite."""
    pts, recent = [], []
    for s in sorted(losses):
        v = losses[s]
        if v is None:
            pts.append((s, None))
            recent = []
            continue
        recent = (recent + [v])[-window:]
        pts.append((s, sum(recent) / len(recent)))
    return pts


def difference_from_bf16(smoothed, recipes, seeds):
    """{(recipe, seed): [(step, its smoothed loss minus bf16's at the same seed and step)]} for every
    recipe but bf16 whose seed bf16 also ran; None where either is not finite. The same seed is the same
    initialisation and data order, so what is left is the recipe's own effect, step by step."""
    diffs = {}
    for r in recipes:
        for s in seeds:
            base = dict(smoothed.get(("bf16", s), []))
            if r == "bf16" or not base:
                continue
            diffs[(r, s)] = [(step, None if v is None or base.get(step) is None else v - base[step])
                             for step, v in smoothed[(r, s)] if step in base]
    return diffs


def panel(curves, styles, x0, y0, w, h, lo_step, hi_step, title, around_zero=False):
    """One chart of the smoothed curves between lo_step and hi_step, as SVG elements; around_zero
    centres the value axis on 0 and draws the zero line."""
    ys = [v for pts in curves.values() for s, v in pts if v is not None and lo_step <= s <= hi_step]
    if not ys:
        return [f'<text x="{x0}" y="{y0 + 20}">{title}: no finite values</text>']
    ymin, ymax = min(ys), max(ys)
    if around_zero:
        ymax = max(abs(ymin), abs(ymax))
        ymin = -ymax
    pad = (ymax - ymin) * 0.05 or 0.5
    ymin, ymax = ymin - pad, ymax + pad
    span = max(hi_step - lo_step, 1)
    X = lambda s: x0 + (s - lo_step) / span * w
    Y = lambda v: y0 + h - (v - ymin) / (ymax - ymin) * h
    el = [f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>',
          f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle" font-weight="bold">{title}</text>']
    for i in range(5):
        v = ymin + (ymax - ymin) * i / 4
        el.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#eee"/>')
        el.append(f'<text x="{x0 - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.3f}</text>')
        s = lo_step + span * i / 4
        el.append(f'<text x="{X(s):.1f}" y="{y0 + h + 16}" text-anchor="middle">{s:.0f}</text>')
    if around_zero:
        el.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{Y(0):.1f}" y2="{Y(0):.1f}" stroke="#555"/>')
    for key, pts in curves.items():
        colour, dash = styles[key]
        d, pen = [], "M"
        for s, v in pts:
            if not lo_step <= s <= hi_step:
                continue
            if v is None:
                pen = "M"
                continue
            d.append(f"{pen}{X(s):.1f},{Y(v):.1f}")
            pen = "L"
        if d:
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            el.append(f'<path d="{" ".join(d)}" fill="none" stroke="{colour}" stroke-width="1.3"{dash_attr}/>')
    return el


def write_svg(path, curves, recipes, seeds, steps, last):
    window = max(1, steps // 50)
    smoothed = {k: smooth(v, window) for k, v in curves.items()}
    styles = {}
    for i, r in enumerate(recipes):
        colour = COLOURS.get(r, EXTRA[i % len(EXTRA)])
        for j, s in enumerate(seeds):
            styles[(r, s)] = (colour, DASHES[j % len(DASHES)])
    diffs = difference_from_bf16(smoothed, recipes, seeds)
    legend_y = 665 if diffs else 405  # below the difference panel where there is one
    W, H = 1000, legend_y + 16 * ((len(styles) + 3) // 4) + 4
    el = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
          f'<rect width="{W}" height="{H}" fill="white"/>',
          f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">Training loss, mean of the last '
          f'{window} steps: {", ".join(recipes)} × seeds {", ".join(map(str, seeds))}</text>']
    el += panel(smoothed, styles, 70, 50, 400, 320, 0, steps, "all steps")
    el += panel(smoothed, styles, 560, 50, 400, 320, max(0, steps - 2 * last), steps,
                f"the last {2 * last} steps (the mean is over the last {last})")
    if diffs:
        el += panel(diffs, styles, 70, 420, 890, 200, 0, steps,
                    "loss minus bf16's at the same seed (same initialisation and data order), smoothed alike",
                    around_zero=True)
    y = legend_y
    for i, (key, (colour, dash)) in enumerate(styles.items()):
        x = 70 + (i % 4) * 230
        yy = y + (i // 4) * 16
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        el.append(f'<line x1="{x}" x2="{x + 30}" y1="{yy}" y2="{yy}" stroke="{colour}" stroke-width="2"{dash_attr}/>')
        el.append(f'<text x="{x + 36}" y="{yy + 4}">{key[0]} seed {key[1]}</text>')
    el.append("</svg>")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(el) + "\n")
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs_dir")
    p.add_argument("--recipes", required=True)
    p.add_argument("--seeds", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--last", type=int, default=200)
    p.add_argument("--svg")
    a = p.parse_args()
    recipes, seeds = a.recipes.split(), a.seeds.split()
    if not recipes or not seeds:
        p.error("--recipes and --seeds need at least one word each")
    if a.steps < 1 or not 1 <= a.last <= a.steps:
        p.error(f"need 1 <= --last ({a.last}) <= --steps ({a.steps})")
    if not os.path.isdir(a.runs_dir):
        p.error(f"{a.runs_dir}: not a directory")
    out, curves = summarize(a.runs_dir, recipes, seeds, a.steps, a.last)
    if a.svg:
        write_svg(a.svg, curves, recipes, seeds, a.steps, a.last)
        out["svg"] = a.svg
    print(json.dumps(out, indent=1))
    return 1 if out["incomplete"] else 0


if __name__ == "__main__":
    sys.exit(main())
