#!/usr/bin/env python3
"""Writes llm.c .bin token shards of uniformly random ids (header: magic 20240520, version 1,
token count; then uint16 tokens), in 64 MiB pieces so that shards larger than memory can be made:
    make_token_shards.py OUT_PREFIX TOTAL_TOKENS VOCAB SHARDS [SEED]
makes OUT_PREFIX_000000.bin ... with TOTAL_TOKENS split evenly. Prints the paths."""
import sys
import numpy as np

prefix, total, vocab, shards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
seed = int(sys.argv[5]) if len(sys.argv) > 5 else 0
if vocab > 65536 or shards < 1 or total < shards:
    sys.exit("make_token_shards: need VOCAB <= 65536, SHARDS >= 1 and TOTAL_TOKENS >= SHARDS")
rng = np.random.default_rng(seed)
piece = 32 * 1024 * 1024  # tokens per write: 64 MiB
for s in range(shards):
    count = total // shards + (1 if s < total % shards else 0)
    path = f"{prefix}_{s:06d}.bin"
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, count)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        left = count
        while left > 0:
            n = min(piece, left)
            f.write(rng.integers(0, vocab, size=n, dtype=np.uint16).tobytes())
            left -= n
    print(path)
