#!/usr/bin/env python3
"""Writes a token dataset of uniformly random ids (as the PyTorch peer trains on), HDF5 /tokens
uint16 (uint32 for a vocabulary above 65536, e.g. Llama 3's 128256), for throughput benchmarks:
make_random_tokens.py OUT.h5 N_TOKENS VOCAB [SEED]"""
import sys
import h5py, numpy as np

out, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
dtype = np.uint16 if vocab <= 65536 else np.uint32
tokens = np.random.default_rng(seed).integers(0, vocab, size=n, dtype=dtype)
with h5py.File(out, "w") as f:
    f.create_dataset("tokens", data=tokens)
    f.attrs["vocab_size"] = vocab
    f.attrs["tokenizer"] = "random"
print(f"wrote {out}: {n} random tokens, vocab {vocab}")
