#!/usr/bin/env python3
"""The report page of a real CPU run under mpirun -np 2: a non-finite step (skipped), evaluations,
rank 1 killed after step 7, a resume from step_4. The page that the resumed attempt writes, and the
one `tetra report RUN_DIR --html OUT` writes, parse as XML (XHTML with inline SVG), stay under 2 MB,
fetch nothing, and show the text report's numbers (and goodput.json's, to the last bit), every
attempt, the lost steps 5..7, the skipped step 3, the restart and the evaluations. A run that
ends in an error (a rank that stops answering) writes its page too; run.html_report: false writes
none; a page that cannot be written leaves the run's exit code alone.

usage: report_page.py TETRA_BIN WORK_DIR"""
import json
import os
import re
import sys
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check, fail, metrics  # noqa: E402

XHTML = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}"
tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=12, every=4)
EVAL = ["train.eval_every=3", "train.eval_batches=2", "data.val_fraction=0.1"]


def text_of(e):
    return "".join(e.itertext()).strip()


def parse_page(path):
    size = os.path.getsize(path)
    check(size < 2 * 1024 * 1024, f"{os.path.basename(path)}: {size} bytes, under 2 MB")
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        fail(f"{path} is not well-formed XML: {e}")
    check(root.tag == XHTML + "html", "the root is an XHTML <html>")
    for e in root.iter():
        check_local = e.tag.split("}")[-1]
        if check_local in ("script", "link", "img", "iframe", "object", "embed"):
            fail(f"the page has a <{check_local}>: it must be self-contained")
        for a, v in e.attrib.items():
            if a.endswith("href") or a == "src" or (isinstance(v, str) and "url(http" in v):
                fail(f"the page refers to something outside itself: {a}={v}")
    return root


def text_report_rows(text):
    """{label: (seconds, percent)} of the printed table, and the attempts table's lines."""
    rows = {}
    for m in re.finditer(r"^  +([a-z][a-z ()-]+?) +(\d+\.\d) +(\d+\.\d|-)$", text, re.M):
        rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


# ---- a run with a skipped step, evaluations, a kill and a resume ----------------------------
_, _, rc = ws.train("r", sets=EVAL, fault="kill@7:rank=1,nan@3:rank=1", expect=None)
check(rc != 0, f"the killed job exits non-zero ({rc})")
run = ws.run_dir("r")
check(not os.path.exists(os.path.join(run, "report.html")), "a SIGKILLed attempt writes no page (it cannot)")
out, err, _ = ws.train("r", sets=EVAL + ["checkpoint.resume=auto"])
page_path = os.path.join(run, "report.html")
check(f"tetra: wrote {page_path}" in out, "the resumed attempt says where the page is")
check(not os.path.exists(page_path + ".tmp"), "no temporary file is left")
root = parse_page(page_path)

rep, _, _ = ws.tetra_cmd("report", run, "--html", os.path.join(work, "copy.html"))
check(f"wrote {os.path.join(work, 'copy.html')}" in rep, "tetra report RUN_DIR --html OUT writes OUT")
copy = parse_page(os.path.join(work, "copy.html"))
with open(os.path.join(run, "goodput.json")) as f:
    g = json.load(f)
rows = text_report_rows(rep)
check(len(rows) >= 16, f"the text report's table has its rows ({len(rows)})")

# The breakdown: the same label, seconds and percent as the text, the same seconds as goodput.json.
table = copy.find(f".//{XHTML}table[@class='breakdown-table']")
check(table is not None, "the page has the breakdown table")
seen = 0
for tr in table.iter(XHTML + "tr"):
    name = tr.get("data-category")
    if name is None:
        continue
    tds = [text_of(td) for td in tr.findall(XHTML + "td")]
    label, secs, pct = tds
    if label not in rows:
        fail(f"page row {label!r} is not in the text report")
    if (secs, pct) != rows[label]:
        fail(f"{label}: page {secs} s {pct} %, text report {rows[label][0]} s {rows[label][1]} %")
    want = g["wall_seconds"] if name == "total" else g["seconds"][name]
    if abs(float(tr.get("data-seconds")) - want) > 1e-9 * max(1.0, abs(want)):
        fail(f"{name}: page {tr.get('data-seconds')} s, goodput.json {want} s")
    seen += 1
check(seen == 17, f"every category and the total on the page equal the text report and goodput.json ({seen} rows)")
# Exposed communication per mesh axis (dp 2 here): the text report's rows under it, goodput.json's seconds.
axes = {tr.get("data-axis"): tr for tr in table.iter(XHTML + "tr") if tr.get("data-axis")}
check(set(axes) == set(g["exposed_comm_by_axis"]) and "dp" in axes,
      f"the page splits exposed communication by axis as goodput.json does ({sorted(axes)})")
for axis, tr in axes.items():
    label, secs, pct = [text_of(td) for td in tr.findall(XHTML + "td")]
    check(label == f"{axis} axis" and rows.get(label) == (secs, pct),
          f"{label}: page {secs} s {pct} %, text report {rows.get(label)}")
    check(abs(float(tr.get("data-seconds")) - g["exposed_comm_by_axis"][axis]) <= 1e-9 * max(1.0, float(secs)),
          f"{label}: the seconds of goodput.json")
cards = {c.get("data-field"): text_of(c.find(f"{XHTML}div[@class='v']")) for c in copy.iter(XHTML + "div")
         if c.get("class") == "card"}
goodput_line = re.search(r"goodput +(\S+) %", rep).group(1)
check(cards["goodput"] == goodput_line + " %", f"the goodput card says {cards['goodput']}, as the text report")
check(cards["attempts"] == "2 (1 restart)" and cards["steps"] == "11",
      "cards: 2 attempts (1 restart), 11 steps kept (the skipped step 3 is not)")
check(g["steps"]["skipped"] == 1 and g["seconds"]["skipped_steps"] > 0 and "steps skipped (non-finite)" in rows,
      "the skipped step 3 is badput of its own in goodput.json and the text report")

# Every attempt: the attempts table as printed, a row of the timeline, a band on the curves.
text_attempts = [l.split() for l in rep.splitlines() if re.match(r"^ +[12] +\S+ +2 +\d{4}-", l)]
page_attempts = [[text_of(td) for td in tr.findall(XHTML + "td")] for tr in copy.iter(XHTML + "tr")
                 if tr.get("data-attempt")]
check(len(page_attempts) == 2 and len(text_attempts) == 2, "two attempts in both tables")
for p, t in zip(page_attempts, text_attempts):
    if " ".join(p).split() != t:
        fail(f"attempt row differs: page {p}, text {t}")
check(page_attempts[0][-1] == "no attempt_end: crashed" and page_attempts[1][-1] == "finished (exit 0)",
      "attempt 1 crashed, attempt 2 finished, on the page as in the text")
labels = [text_of(t) for t in copy.iter(SVG + "text")]
check(labels.count("attempt 1") >= 2 and labels.count("attempt 2") >= 2,
      "each attempt labels the timeline and the curves' bands")

# The curves: lost steps, the skipped step, the restart, the evaluations.
titles = [text_of(t) for t in copy.iter(SVG + "title")]
charts = {f.get("id") for f in copy.iter(XHTML + "figure")}
for want in ("loss-step", "loss-time", "lr-step", "grad-norm-step", "tokens-per-s-step", "step-ms-step",
             "step-parts-step", "step-parts-time"):
    check(want in charts, f"chart {want} is on the page")
n_charts = len([c for c in charts if c.endswith("-step")])
lost = "attempt 1: steps 5..7 lost to failures (3 executions thrown away)"
check(titles.count(lost) == 2 * n_charts, "the lost steps 5..7 are shaded on every chart, against step and time")
skip = [t for t in titles if t.startswith("step 3 (attempt 1): non-finite loss")]
check(len(skip) == 2 * n_charts, "the skipped step 3 is marked on every chart")
check(any(t == "attempt 2 takes over at step 5, resumed from the checkpoint of step 4" for t in titles),
      "the restart is a rule at step 5")
m = metrics(run)
evals = sorted(s for s, r in m.items() if r.get("val_loss") is not None)
check(evals == [3, 6, 9, 12], f"metrics.jsonl has the evaluations at 3, 6, 9, 12 ({evals})")
fig = [f for f in copy.iter(XHTML + "figure") if f.get("id") == "loss-step"][0]
dots = [text_of(c.find(SVG + "title")) for c in fig.iter(SVG + "circle")]
check([int(d.rsplit(" ", 1)[1]) for d in dots] == evals, f"the loss chart has a dot per evaluation ({len(dots)})")
paths = [p for p in fig.iter(SVG + "path") if "ln s0" in (p.get("class") or "")]
check(any(p.get("d", "").startswith("M") for p in paths), "the training loss is drawn")
sections = {s.get("id"): s for s in copy.iter(XHTML + "section")}
check("eval_every: 3" in text_of(sections["config"]), "the resolved config is on the page")
check("world 2" in text_of(sections["mesh"]), "the mesh is on the page")
check(text_of(sections["text-report"]).count("3 lost to failures") == 1, "the text report is on the page")
check(len(list(root.iter(SVG + "svg"))) == len(list(copy.iter(SVG + "svg"))), "the trainer's page has the same parts")

# ---- run.html_report: false -----------------------------------------------------------------
out, _, _ = ws.train("off", sets=["run.html_report=false"])
check(not os.path.exists(os.path.join(ws.run_dir("off"), "report.html")) and "report.html" not in out,
      "run.html_report: false writes no page")

# ---- a page that cannot be written does not change the outcome -----------------------------
blocked = ws.run_dir("blocked")
os.makedirs(os.path.join(blocked, "report.html", "in the way"), exist_ok=True)
_, err, rc = ws.train("blocked", sets=["checkpoint.resume=auto"], expect=0)
check("tetra: warning: the report page was not written" in err, "a page in the way is a warning, exit 0")

# ---- an attempt that ends in an error writes its page ---------------------------------------
t0 = time.time()
out, err, rc = ws.train("hang", sets=["run.comm_timeout_s=3"], fault="stop@3:rank=1", expect=None, timeout=90)
pid = re.search(r"rank 1 \(pid (\d+) on [^)]+\) did not reach the timeout", err)
if pid:  # the stopped rank goes down with the job; make sure of it
    for _ in range(100):
        p = f"/proc/{pid.group(1)}"
        if not os.path.exists(p) or open(p + "/stat").read().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        os.kill(int(pid.group(1)), 9)
check(rc == 4, f"the hung job ends with exit 4 ({rc}, {time.time() - t0:.1f} s)")
hang = parse_page(os.path.join(ws.run_dir("hang"), "report.html"))
ended = [text_of(tr.findall(XHTML + "td")[-1]) for tr in hang.iter(XHTML + "tr") if tr.get("data-attempt")]
check(ended == ["error (exit 4)"], f"the failed attempt's page says how it ended ({ended})")
print("PASS")
