#!/usr/bin/env python3
"""The report page in a real browser: headless Chromium (Debian's chromium package) loads the page
of a synthetic run of 20,000 steps, keeps every part of it in its DOM, and takes a screenshot whose
pixels show the goodput bar, the lost steps, the curves' colours and the page's styles. Exits 77
(ctest: Skipped) where no Chromium is installed. The screenshot stays in WORK_DIR/report.png.

usage: browser_render.py TETRA_BIN WORK_DIR"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SKIP = 77
WIDTH, HEIGHT = 1280, 2600
tetra, work = sys.argv[1], sys.argv[2]


def check(cond, msg):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        sys.exit(1)


def read_png(path):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG."""
    d = open(path, "rb").read()
    check(d[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is a PNG")
    pos, idat, w, h, ctype = 8, b"", 0, 0, 0
    while pos < len(d):
        n, = struct.unpack(">I", d[pos:pos + 4])
        kind, body = d[pos + 4:pos + 8], d[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            check(depth == 8 and ctype in (2, 6), f"8-bit RGB(A) (depth {depth}, colour type {ctype})")
        elif kind == b"IDAT":
            idat += body
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 255
        elif f == 3:
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif f == 4:
            for i in range(stride):
                a, b, c = (line[i - bpp] if i >= bpp else 0), prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


browser = os.environ.get("TETRA_CHROMIUM") or next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
if not browser:
    print("SKIP: no chromium on PATH (apt-get install chromium, or set TETRA_CHROMIUM)")
    sys.exit(SKIP)

os.makedirs(work, exist_ok=True)
run = os.path.join(work, "run")
subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "synthetic_run.py"), run,
                "20000"], check=True)
page = os.path.join(work, "report.html")
subprocess.run([tetra, "report", run, "--html", page], check=True, stdout=subprocess.DEVNULL)
source = open(page, encoding="utf-8").read()


def chromium(*args):
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            "--no-first-run", f"--user-data-dir={profile}", *args, "file://" + page],
                           capture_output=True, text=True, timeout=180)
    check(r.returncode == 0, f"chromium {args[0]} exits 0 ({r.stderr[-1500:] if r.returncode else ''})")
    return r.stdout


dom = chromium("--dump-dom")
for part in ("<svg", "<figure", "<table", "<section"):
    check(dom.count(part) == source.count(part) > 0,
          f"the browser's DOM has every {part}> of the page ({dom.count(part)} of {source.count(part)})")
shot = os.path.join(work, "report.png")
if os.path.exists(shot):
    os.remove(shot)
chromium(f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={shot}")
w, h, bpp, rows = read_png(shot)
check((w, h) == (WIDTH, HEIGHT), f"the screenshot is {w}×{h}")


def pixels_of(rgb, y0=0, y1=None):
    want = bytes(rgb)
    n = 0
    for row in rows[y0:y1]:
        for x in range(0, len(row), bpp):
            if row[x:x + 3] == want:
                n += 1
    return n


colours = set()
for row in rows[::7]:
    for x in range(0, len(row), bpp * 5):
        colours.add(row[x:x + 3])
check(len(colours) > 40, f"the screenshot is not blank ({len(colours)} colours sampled)")
check(rows[2][:3] == bytes((0xf4, 0xf5, 0xf7)), "the page's background colour: the inline CSS applies")
check(pixels_of((0x2e, 0x9e, 0x5b), 0, 900) > 5000, "the goodput bar shows productive time (green)")
check(pixels_of((0xe1, 0x57, 0x59)) > 20, "lost steps are drawn (red)")
check(pixels_of((0x1f, 0x77, 0xb4)) > 20, "the training loss's colour is on the page")
check(pixels_of((0xd6, 0x27, 0x28)) > 20, "skipped steps are marked (red triangles)")
print(f"screenshot: {shot}")
print("PASS")
