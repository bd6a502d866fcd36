#!/usr/bin/env python3
"""The summary line of scripts/bench/fp8_throughput.sh from its runs' JSON lines:
  fp8_throughput_summary.py SHAPE ROLE JSON [ROLE JSON ...]
ROLE: tetra-bf16, tetra-fp8-RECIPE, peer-bf16, peer-fp8-tensorwise. Prints one JSON line with each
run's tokens/s and the ratios: each tetra FP8 recipe over tetra bf16, the peer's FP8 over its bf16,
tetra over the peer in bf16 and (tensorwise) in FP8, and the devices the runs name (tetra's lines
carry theirs). A ratio whose runs failed is null, and the failed runs are listed; exit 1 when there
are any."""
import json, sys


def summarize(shape, pairs):
    tok, failed, devices = {}, [], set()
    for role, line in pairs:
        try:
            run = json.loads(line)
        except ValueError:
            run = {"error": True}
        if run.get("error") or not run.get("tokens_per_s"):
            failed.append(role)
        else:
            tok[role] = run["tokens_per_s"]
        if run.get("device"):
            devices.add(run["device"])

    def ratio(a, b):
        return round(tok[a] / tok[b], 3) if a in tok and b in tok else None

    out = {"summary": True, "shape": shape, "tokens_per_s": tok}
    for role, _ in pairs:
        if role.startswith("tetra-fp8-"):
            out[f"{role}_over_tetra-bf16"] = ratio(role, "tetra-bf16")
    roles = [r for r, _ in pairs]
    if "peer-bf16" in roles:
        out["peer-fp8-tensorwise_over_peer-bf16"] = ratio("peer-fp8-tensorwise", "peer-bf16")
        out["tetra-bf16_over_peer-bf16"] = ratio("tetra-bf16", "peer-bf16")
        if "tetra-fp8-tensorwise" in roles:
            out["tetra-fp8-tensorwise_over_peer-fp8-tensorwise"] = ratio("tetra-fp8-tensorwise", "peer-fp8-tensorwise")
    out["devices"] = sorted(devices)
    out["failed"] = failed
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 3 or len(args) % 2 == 0:
        sys.exit(__doc__)
    summary = summarize(args[0], list(zip(args[1::2], args[2::2])))
    print(json.dumps(summary))
    sys.exit(1 if summary["failed"] else 0)
