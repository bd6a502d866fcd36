#!/usr/bin/env python3
"""log.tensorboard: a CPU run under mpirun killed after step 5 (checkpoint at step 3) and resumed
writes one event file per attempt into RUN_DIR/tensorboard. An independent reader here parses the
TFRecord framing, checks both masked CRC-32Cs of every record and decodes the Event, Summary and
SessionLog protobuf fields by hand: each file starts with the file version and a SessionLog START
at the attempt's first step, its steps never go back, its scalars equal metrics.jsonl's (as
float32), and the finished attempt ends with every goodput category of goodput.json. Where the
`tensorboard` package imports, its event loader reads the folder too and sees steps 1..8 once each,
the redone steps 4 and 5 with the resumed attempt's values (that part is skipped without it).

usage: tensorboard_events.py TETRA_BIN WORK_DIR"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, checkpoint_steps, fail, metrics  # noqa: E402

# ---- an independent reader: CRC-32C, TFRecord, protobuf wire format -------------------------------
CRC_TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    CRC_TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The payloads of a TFRecord file; fails on a bad length, CRC or a cut-short record."""
    data = open(path, "rb").read()
    at, out = 0, []
    while at < len(data):
        if at + 12 > len(data):
            fail(f"{path}: a cut-short record header at byte {at}")
        (n,) = struct.unpack_from("<Q", data, at)
        (len_crc,) = struct.unpack_from("<I", data, at + 8)
        if len_crc != masked(data[at:at + 8]):
            fail(f"{path}: the length CRC of the record at byte {at} is wrong")
        if at + 12 + n + 4 > len(data):
            fail(f"{path}: the record at byte {at} is cut short")
        payload = data[at + 12:at + 12 + n]
        (data_crc,) = struct.unpack_from("<I", data, at + 12 + n)
        if data_crc != masked(payload):
            fail(f"{path}: the data CRC of the record at byte {at} is wrong")
        out.append(payload)
        at += 12 + n + 4
    return out


def varint(buf, at):
    v, shift = 0, 0
    while True:
        b = buf[at]
        at += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, at


def fields(buf):
    """(field number, wire type, value) of a protobuf message: ints for varints, bytes otherwise."""
    at, out = 0, []
    while at < len(buf):
        k, at = varint(buf, at)
        num, wire = k >> 3, k & 7
        if wire == 0:
            v, at = varint(buf, at)
        elif wire == 1:
            v, at = buf[at:at + 8], at + 8
        elif wire == 2:
            n, at = varint(buf, at)
            v, at = buf[at:at + n], at + n
        elif wire == 5:
            v, at = buf[at:at + 4], at + 4
        else:
            fail(f"unexpected wire type {wire} of field {num}")
        out.append((num, wire, v))
    return out


def decode_event(buf):
    """tensorflow.Event: wall_time 1, step 2, file_version 3, summary 5 (Summary.value 1: tag 1,
    simple_value 2), session_log 7 (status 1)."""
    ev = {"step": 0, "scalars": {}}
    for num, wire, v in fields(buf):
        if num == 1 and wire == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wire == 0:
            ev["step"] = v
        elif num == 3 and wire == 2:
            ev["file_version"] = v.decode()
        elif num == 5 and wire == 2:
            for vnum, vwire, value in fields(v):
                if (vnum, vwire) != (1, 2):
                    fail(f"unexpected Summary field {vnum}")
                tag, simple = None, None
                for fnum, fwire, f in fields(value):
                    if (fnum, fwire) == (1, 2):
                        tag = f.decode()
                    elif (fnum, fwire) == (2, 5):
                        simple = struct.unpack("<f", f)[0]
                if tag is None or simple is None:
                    fail("a Summary.Value without a tag or a simple_value")
                ev["scalars"][tag] = simple
        elif num == 7 and wire == 2:
            ev["session_log"] = dict((n, x) for n, _, x in fields(v))
        else:
            fail(f"unexpected Event field {num} (wire type {wire})")
    return ev


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


# ---- the run ------------------------------------------------------------------------------------
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=8, every=3)
sets = ["log.tensorboard=true", "train.eval_every=4", "data.val_fraction=0.1"]
_, _, rc = ws.train("tb", sets=sets, fault="kill@5:rank=1", expect=None)
check(rc != 0, f"the killed job exits non-zero (mpirun: {rc})")
run = ws.run_dir("tb")
check(checkpoint_steps(run) == [3], "step_3 was the last checkpoint before the kill")
ws.train("tb", sets=sets + ["checkpoint.resume=auto"])

tb_dir = os.path.join(run, "tensorboard")
files = sorted(n for n in os.listdir(tb_dir) if "tfevents" in n)
check(len(files) == 2 and files[0].endswith(".1") and files[1].endswith(".2"),
      f"one event file per attempt, in order: {files}")
events = [[decode_event(r) for r in records(os.path.join(tb_dir, f))] for f in files]
print(f"ok: every record of both files has a valid length and data CRC-32C ({sum(map(len, events))} records)")

rows = metrics(run)  # step -> the last metrics.jsonl line (attempt 2's for the redone steps)
lines_by_attempt = {}
with open(os.path.join(run, "metrics.jsonl")) as f:
    for line in f:
        j = json.loads(line)
        lines_by_attempt[(j["attempt"], j["step"])] = j
standard = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm", "train/tokens": "tokens",
            "perf/tokens_per_s": "tokens_per_s", "perf/mfu": "mfu", "perf/step_ms": "step_ms",
            "perf/exposed_comm_ms": "exposed_comm_ms", "perf/data_wait_ms": "data_wait_ms",
            "perf/optimizer_ms": "optimizer_ms", "memory/peak_gib": "mem_peak_gib"}
for attempt, (evs, first, last) in enumerate(zip(events, (1, 4), (5, 8)), start=1):
    check(evs[0].get("file_version") == "brain.Event:2" and evs[0]["wall_time"] > 1.6e9,
          f"attempt {attempt}: the first record is the file version with a Unix wall time")
    check(evs[1].get("session_log") == {1: 1} and evs[1]["step"] == first,
          f"attempt {attempt}: then a SessionLog START at step {first}")
    steps = [e["step"] for e in evs[2:]]
    check(all(a <= b for a, b in zip(steps, steps[1:])), f"attempt {attempt}: steps never go back ({steps})")
    per_step = [e for e in evs[2:] if "train/loss" in e["scalars"]]
    check([e["step"] for e in per_step] == list(range(first, last + 1)),
          f"attempt {attempt}: one scalar event per step {first}..{last}")
    for e in per_step:
        row = lines_by_attempt[(attempt, e["step"])]
        for tag, key in standard.items():
            if tag not in e["scalars"] or f32(row[key]) != e["scalars"][tag]:
                fail(f"attempt {attempt} step {e['step']}: {tag} = {e['scalars'].get(tag)}, metrics.jsonl "
                     f"{key} = {row[key]}")
        if "val_loss" in row and f32(row["val_loss"]) != e["scalars"].get("val/loss"):
            fail(f"step {e['step']}: val/loss {e['scalars'].get('val/loss')} against {row['val_loss']}")
        if ("val/loss" in e["scalars"]) != ("val_loss" in row):
            fail(f"step {e['step']}: val/loss written where metrics.jsonl has none, or missing")
    print(f"ok: attempt {attempt}: loss, lr, grad norm, tokens, tokens/s, MFU, step and its parts, memory "
          f"(and val loss at steps 4, 8) equal metrics.jsonl as float32")
check(not any(t.startswith("goodput/") for e in events[0] for t in e["scalars"]),
      "the killed attempt wrote no goodput (it never ended)")
end = events[1][-1]
goodput = json.load(open(os.path.join(run, "goodput.json")))
want = {"goodput/goodput": goodput["goodput"]}
want.update({f"goodput/{k}_s": v for k, v in goodput["seconds"].items()})
check(end["step"] == 8 and set(end["scalars"]) == set(want) and
      all(f32(v) == end["scalars"][k] for k, v in want.items()),
      f"the finished attempt ends with the goodput and each of its {len(want) - 1} categories at step 8")
check(0 < end["scalars"]["goodput/goodput"] <= 1, "goodput is a fraction")

# A folder that cannot be made (a file named tensorboard in the run directory): every rank stops
# before the first step with the path and the way out, and the file is left as it was.
blocked = ws.run_dir("blocked")
os.makedirs(blocked, exist_ok=True)
with open(os.path.join(blocked, "tensorboard"), "w") as f:
    f.write("the user's file\n")
_, err, rc = ws.train("blocked", sets=["log.tensorboard=true", "checkpoint.resume=auto"], expect=None)
check(rc != 0 and "cannot create the folder" in err and "log.tensorboard: false" in err,
      f"an event folder that cannot be made stops the run (exit {rc}) and says how to go on")
blocked_metrics = os.path.join(blocked, "metrics.jsonl")
check(open(os.path.join(blocked, "tensorboard")).read() == "the user's file\n" and
      (not os.path.exists(blocked_metrics) or os.path.getsize(blocked_metrics) == 0),
      "the file in its way is untouched and no step was trained")

# ---- TensorBoard's own loader, where it is installed ---------------------------------------------
try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError:
    print("skip: the tensorboard package is not importable; its event loader was not tried")
    print("PASS")
    sys.exit(0)
acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
loss = acc.Scalars("train/loss")
check([s.step for s in loss] == list(range(1, 9)),
      f"tensorboard's loader: train/loss at steps 1..8 once each ({[s.step for s in loss]})")
check(all(f32(rows[s.step]["loss"]) == s.value for s in loss),
      "tensorboard's loader: the values are the last run of each step (the resumed ones for 4, 5)")
check("goodput/goodput" in acc.Tags()["scalars"] and "perf/mfu" in acc.Tags()["scalars"],
      "tensorboard's loader: MFU and goodput are there")
print("PASS")
