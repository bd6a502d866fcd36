#!/usr/bin/env python3
"""Real text that every machine has offline, for tokenizer and training benchmarks: the Python
installation's sources, /usr/include and /usr/share/doc text, concatenated into documents of about
DOC_KB kB (default 4000), each written as DIR/docNNNNN.txt (one document per file), repeated where
they fall short of MB. A DIR whose documents already hold MB, made at the same DOC_KB (kept in
DIR/.doc_kb), is left as it is; files of DIR other than these are never touched.
usage: gather_text.py DIR MB [DOC_KB]"""
import os, re, sys, sysconfig

ROOTS = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], "/usr/include", "/usr/share/doc",
         "/usr/lib/python3"]
EXTS = (".py", ".c", ".h", ".hpp", ".txt", ".md", ".rst", ".html", ".json")


def sources():
    found = []
    for root in ROOTS:
        for d, _, files in os.walk(root):
            found += [os.path.join(d, f) for f in sorted(files) if f.endswith(EXTS)]
    return found


def gather(out, target, doc_kb):
    os.makedirs(out, exist_ok=True)
    ours = [os.path.join(out, f) for f in os.listdir(out) if re.fullmatch(r"doc\d+\.txt", f)]
    marker = os.path.join(out, ".doc_kb")
    made_at = open(marker).read() if os.path.exists(marker) else None
    if sum(os.path.getsize(f) for f in ours) >= target and made_at == str(doc_kb):
        return
    for f in ours + ([marker] if made_at is not None else []):
        os.remove(f)
    paths = sources()
    if not paths:
        sys.exit(f"gather_text.py: no text files under {', '.join(ROOTS)}")
    chunk = doc_kb * 1000
    written, n, size, buf = 0, 0, 0, []

    def flush():
        nonlocal n, buf
        with open(os.path.join(out, f"doc{n:05d}.txt"), "wb") as f:
            f.write(b"".join(buf))
        n, buf = n + 1, []

    while written < target:
        for path in paths:
            try:
                data = open(path, "rb").read()
            except OSError:
                continue
            buf.append(data)
            size += len(data)
            written += len(data)
            if size >= chunk:
                flush()
                size = 0
            if written >= target:
                break
    if buf:
        flush()
    with open(marker, "w") as f:
        f.write(str(doc_kb))


def number(text, what, kind):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not value > 0:
        sys.exit(f"gather_text.py: {what} must be a positive number, got {text!r}")
    return value


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    mb = number(sys.argv[2], "MB", float)
    doc_kb = number(sys.argv[3], "DOC_KB", int) if len(sys.argv) == 4 else 4000
    gather(sys.argv[1], int(mb * 1e6), doc_kb)
