"""The speed peer of `tetra data prepare --tokenizer`: Hugging Face `tokenizers` encode_batch on the
same files (each file one document), the same number of threads.

    python3 tokenize_peer.py --tokenizer DIR/tokenizer.json --threads N [--batch-mb 64] FILE...

Prints one JSON line: MB/s (input bytes over the seconds spent in encode_batch), bytes, documents,
tokens, seconds, and the sha256 of all ids in order as little-endian uint32 (what
tokenize_throughput.sh compares with tetra's /tokens). Files are read and encoded in batches of
about --batch-mb MB so memory stays bounded; reading and hashing are not timed.
"""
import argparse
import hashlib
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch-mb", type=float, default=64)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    # Rayon reads its pool size once, when tokenizers first runs in parallel.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    try:
        import numpy as np
        from tokenizers import Tokenizer
    except ImportError as e:
        print(f"tokenize_peer.py: {e}", file=sys.stderr)
        sys.exit(2)
    tok = Tokenizer.from_file(args.tokenizer)
    digest = hashlib.sha256()
    total_bytes = tokens = 0
    seconds = 0.0
    batch, batch_bytes = [], 0

    def flush():
        nonlocal tokens, seconds, batch, batch_bytes
        if not batch:
            return
        t0 = time.perf_counter()
        encs = tok.encode_batch(batch, add_special_tokens=False)
        seconds += time.perf_counter() - t0
        for e in encs:
            ids = np.asarray(e.ids, dtype="<u4")
            tokens += ids.size
            digest.update(ids.tobytes())
        batch, batch_bytes = [], 0

    for path in args.files:
        with open(path, "rb") as f:
            data = f.read()
        total_bytes += len(data)
        batch.append(data.decode("utf-8", errors="replace"))
        batch_bytes += len(data)
        if batch_bytes >= args.batch_mb * 1e6:
            flush()
    flush()
    print(json.dumps({"tool": "tokenizers", "threads": args.threads, "documents": len(args.files), "bytes": total_bytes,
                      "tokens": tokens, "seconds": round(seconds, 3),
                      "mb_per_s": round(total_bytes / 1e6 / seconds, 2) if seconds else None,
                      "ids_sha256": digest.hexdigest()}))


if __name__ == "__main__":
    main()
