#!/usr/bin/env python3
"""An independent safetensors writer and reader (json + numpy, bf16 through torch) for testing
tetra's runtime/safetensors against the format as Hugging Face specifies it: an 8-byte
little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__"},
then the raw little-endian tensors, offsets relative to the end of the header.

  safetensors_reference.py write OUT.safetensors EXPECT.h5
      writes F32, BF16, F16, F64, I64, empty and 0-d tensors with metadata, the data in another
      order than the header lists them; EXPECT.h5 holds each float tensor's values (float64).
  safetensors_reference.py read IN.safetensors EXPECT.h5
      checks a file tetra wrote: its layout, and that every dataset of EXPECT.h5 (the fp32 values
      tetra was given; attribute `dtype` F32 or BF16) is in it with the right dtype, shape and
      values (BF16: round to nearest even, as torch converts). Exit 1 with a message otherwise.
"""
import json, struct, sys

import h5py
import numpy as np
import torch


def bf16_bits(values):
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(torch.bfloat16) \
        .view(torch.int16).numpy().view(np.uint16)


def bf16_values(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def write(path, expect_path):
    rng = np.random.default_rng(3)
    items = []  # (name, dtype, shape, raw bytes, expected float64 or None)
    a = rng.normal(size=(3, 5)).astype(np.float32)
    items.append(("a.f32", "F32", [3, 5], a.tobytes(), a.astype(np.float64)))
    b = rng.normal(scale=10, size=(4, 2, 3)).astype(np.float32)
    bits = bf16_bits(b)
    items.append(("b.bf16", "BF16", [4, 2, 3], bits.tobytes(), bf16_values(bits).astype(np.float64)))
    c = np.array([1.5, -0.1, 65504, 6e-8, -0.0, 3.0e-5, 1024.5], dtype=np.float16)  # incl. a subnormal
    items.append(("c.f16", "F16", [7], c.tobytes(), c.astype(np.float64)))
    d = rng.normal(size=(2, 2))
    items.append(("d.f64", "F64", [2, 2], d.astype("<f8").tobytes(), d))
    items.append(("e.empty", "F32", [0, 4], b"", np.zeros((0, 4))))
    items.append(("f.i64", "I64", [3], np.array([1, -2, 3], dtype="<i8").tobytes(), None))
    g = np.array(2.25, dtype=np.float32)
    items.append(("g.scalar", "F32", [], g.tobytes(), g.astype(np.float64)))
    # Data in reverse order of the header: readers must follow data_offsets, not the listing.
    offsets, pos = {}, 0
    for name, _, _, raw, _ in reversed(items):
        offsets[name] = (pos, pos + len(raw))
        pos += len(raw)
    header = {"__metadata__": {"format": "pt", "writer": "python reference"}}
    for name, dtype, shape, raw, _ in items:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": list(offsets[name])}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, _, _, raw, _ in reversed(items):
            f.write(raw)
    with h5py.File(expect_path, "w") as f:
        for name, _, _, _, expected in items:
            if expected is not None:
                f[name] = expected


def load(path):
    """Every tensor of a safetensors file as float32 numpy arrays (F32, BF16, F16), and its metadata."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode())
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    out, dtypes = {}, {}
    for name, h in header.items():
        begin, end = h["data_offsets"]
        raw = body[begin:end]
        if h["dtype"] == "F32":
            v = np.frombuffer(raw, dtype="<f4")
        elif h["dtype"] == "BF16":
            v = bf16_values(np.frombuffer(raw, dtype="<u2"))
        elif h["dtype"] == "F16":
            v = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        else:
            raise ValueError(f"{name}: dtype {h['dtype']}")
        out[name] = v.reshape(h["shape"])
        dtypes[name] = h["dtype"]
    return out, dtypes, meta


def save(path, tensors, metadata=None):
    """Writes name -> float32 array as F32 tensors, in the given order."""
    header, pos, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, v in tensors.items():
        raw = np.ascontiguousarray(v, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [pos, pos + len(raw)]}
        pos += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def read(path, expect_path):
    data = open(path, "rb").read()
    if len(data) < 8:
        fail("shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        fail(f"header length {n} runs past the file")
    header = json.loads(data[8:8 + n].decode())
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    if not all(isinstance(v, str) for v in meta.values()):
        fail("metadata values must be strings")
    spans = sorted(tuple(v["data_offsets"]) for v in header.values())
    pos = 0
    for begin, end in spans:
        if begin != pos:
            fail(f"data not contiguous at {begin} (expected {pos})")
        pos = end
    if pos != len(body):
        fail(f"tensors cover {pos} bytes of {len(body)}")
    sizes = {"F32": 4, "BF16": 2}
    with h5py.File(expect_path, "r") as f:
        want_dtype = f.attrs["dtype"]
        want_dtype = want_dtype.decode() if isinstance(want_dtype, bytes) else str(want_dtype)
        if set(f.keys()) != set(header.keys()):
            fail(f"tensors {sorted(header.keys())}, expected {sorted(f.keys())}")
        for name in f.keys():
            want = f[name][()].astype(np.float32)
            h = header[name]
            if h["dtype"] != want_dtype or h["shape"] != list(want.shape):
                fail(f"{name}: {h['dtype']} {h['shape']}, expected {want_dtype} {list(want.shape)}")
            begin, end = h["data_offsets"]
            if end - begin != want.size * sizes[want_dtype]:
                fail(f"{name}: {end - begin} bytes for {want.size} values")
            raw = body[begin:end]
            if want_dtype == "F32":
                got = np.frombuffer(raw, dtype="<f4").reshape(want.shape)
                if got.tobytes() != want.tobytes():
                    fail(f"{name}: values differ (max {np.max(np.abs(got - want))})")
            else:
                got = np.frombuffer(raw, dtype="<u2").reshape(want.shape)
                if not np.array_equal(got, bf16_bits(want).reshape(want.shape)):
                    fail(f"{name}: bf16 bits differ from round-to-nearest-even")
    print(f"ok: {len(header)} tensors, metadata {meta}")


if __name__ == "__main__":
    mode, path, expect = sys.argv[1:4]
    write(path, expect) if mode == "write" else read(path, expect)
