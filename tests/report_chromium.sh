#!/usr/bin/env bash
# The pages of `leanemb report` and `leanemb plan --html` rendered by a real browser (ctest:
# report_chromium; docs/serve.md, docs/plan.md):
#
#   tests/report_chromium.sh LEANEMB_BINARY
#
# A short training run (16 steps, a row cache, a checkpoint every 4 steps) writes metrics.jsonl
# and a summary; `leanemb report` draws them and `leanemb plan --html` draws the seed's example.
# Headless Chromium (Debian's chromium) loads each page and dumps the DOM it built; the checks
# read the charts from that DOM: the loss polyline has one point per metrics.jsonl record with a
# loss, every series equals its records, the checkpoint markers are the checkpoint records, the
# memory bars are the summary's bytes, and the plan's bars hold the plan's categories and bytes
# (from `plan --json`). A comparison page of the run and a copy of it (`report RUN TWIN`) has one
# polyline per run, with the same values, on every chart. A screenshot of the report page must be a 1200 x 1600 PNG.
# Without chromium the test FAILS: scripts/install_deps.sh installs it.
set -euo pipefail

LEANEMB=${1:?usage: report_chromium.sh LEANEMB_BINARY}
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$CHROMIUM" ]]; then
  echo "report_chromium: FAIL: chromium is not installed (Debian 12: apt-get install chromium; scripts/install_deps.sh installs it)"
  exit 1
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/leanemb_chromium.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=passive

"$LEANEMB" train --quiet --set "data.dir=\"$WORK/data\"" --set data.gen.train_rows=2048 --set data.gen.eval_rows=256 \
  --set data.gen.vocab=200 --set data.num_sparse=4 --set model.table_rows=256 --set model.embedding_dim=8 \
  --set 'model.bottom_mlp=[16, 8]' --set 'model.top_mlp=[16]' --set train.batch_size=128 --set train.threads=2 \
  --set train.log_every=2 --set train.eval_every=4 --set train.checkpoint_every=4 \
  --set embedding.cache_fraction=0.5 --set embedding.cache_min_rows=1 \
  --out "$WORK/run" --json-summary "$WORK/summary.json" > "$WORK/train.out"
"$LEANEMB" report "$WORK/run" --summary "$WORK/summary.json" --quiet
# A comparison page: the run beside a copy of itself (two legend names, the same series).
cp -r "$WORK/run" "$WORK/twin"
"$LEANEMB" report "$WORK/run" "$WORK/twin" --summary "$WORK/summary.json" --summary "$WORK/summary.json" --output "$WORK/compare.html" --quiet
"$LEANEMB" plan --vocab 1000000 --dim 512 --batch 4096 --seq-len 2048 --optimizer adam --preset ascend-910a \
  --json --html "$WORK/plan.html" > "$WORK/plan.json" 2> /dev/null

chromium_run() {
  HOME="$WORK" timeout 60 "$CHROMIUM" --headless --disable-gpu --no-sandbox --no-first-run --disable-dev-shm-usage \
    --hide-scrollbars --user-data-dir="$WORK/profile" "$@" \
    2>> "$WORK/chromium.err" || { cat "$WORK/chromium.err"; echo "report_chromium: FAIL: chromium $* failed"; exit 1; }
}
chromium_run --dump-dom "file://$WORK/run/report.html" > "$WORK/report.dom"
chromium_run --dump-dom "file://$WORK/plan.html" > "$WORK/plan.dom"
chromium_run --dump-dom "file://$WORK/compare.html" > "$WORK/compare.dom"
chromium_run --window-size=1200,1600 --screenshot="$WORK/report.png" "file://$WORK/run/report.html" > /dev/null

/usr/bin/python3 - "$WORK" <<'PY'
import json, struct, sys
from html.parser import HTMLParser

work = sys.argv[1]

class Dom(HTMLParser):
    """Every element as (tag, attributes), each inside the chart (svg id) it belongs to."""
    def __init__(self):
        super().__init__()
        self.elements, self.chart = [], None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self.chart = a.get("id")
        self.elements.append((tag, a, self.chart))
    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
    def handle_endtag(self, tag):
        if tag == "svg":
            self.chart = None

def dom(path):
    d = Dom()
    d.feed(open(path, encoding="utf-8").read())
    return d.elements

failures = []
def check(ok, what):
    if not ok:
        failures.append(what)

def nums(s):
    return [float(v) for v in s.split()]

def close(a, b):
    return len(a) == len(b) and all(abs(x - y) <= 1e-8 * max(1.0, abs(y)) for x, y in zip(a, b))

# ---- the report page ----
els = dom(f"{work}/report.dom")
records = [json.loads(l) for l in open(f"{work}/run/metrics.jsonl") if l.strip()]
logged = [r for r in records if "loss" in r]
evals = [r for r in records if "eval" in r]
ckpts = [r for r in records if "checkpoint" in r]
check(len(logged) == 8 and len(ckpts) == 4 and len(evals) == 5, f"metrics.jsonl: {len(logged)} loss, {len(ckpts)} checkpoint, {len(evals)} eval records")
check(not any(t == "script" for t, _, _ in els), "the report page has a script")

def polyline(series):
    p = [a for t, a, _ in els if t == "polyline" and a.get("data-series") == series]
    check(len(p) == 1, f"one polyline of series {series} (found {len(p)})")
    return p[0] if p else {"points": "", "data-steps": "", "data-values": ""}

def expect_series(series, recs, value):
    p = polyline(series)
    points = p["points"].split()
    check(len(points) == len(recs), f"{series}: {len(points)} points drawn, {len(recs)} records")
    check(nums(p["data-steps"]) == [r["step"] for r in recs], f"{series}: steps differ")
    check(close(nums(p["data-values"]), [value(r) for r in recs]), f"{series}: values differ")

expect_series("loss", logged, lambda r: r["loss"])
expect_series("samples_per_s", logged, lambda r: r["samples_per_s"])
# An fp32 run: the loss scale stays 1 and no step is skipped, so the page draws neither chart.
check(all(r["loss_scale"] == 1 and r["skipped_steps"] == 0 for r in logged), "the fp32 run moved its loss scale or skipped a step")
check(not any(c in ("chart-loss_scale", "chart-skipped_steps") for _, _, c in els), "a loss scale or skipped steps chart for an fp32 run")
expect_series("eval", evals, lambda r: r["eval"]["auc"])
expect_series("checkpoint_seconds", ckpts, lambda r: r["checkpoint_seconds"])
for direction in logged[-1]["transfers"]:
    expect_series(direction, logged, lambda r: r["transfers"][direction])
check("row_cache" in logged[-1], "the cached run's metrics.jsonl has row_cache fields")
for key in ("fetched_bytes", "written_back_bytes"):
    expect_series(key, logged, lambda r: r["row_cache"][key])
check(logged[-1]["transfers"]["device_to_host"] > 0, "the row cache wrote rows back (device->host bytes)")
markers = [a for t, a, c in els if t == "line" and c == "chart-loss" and a.get("data-kind") == "checkpoint"]
check([float(a["data-step"]) for a in markers] == [r["step"] for r in ckpts], "checkpoint markers on the loss chart")
summary = json.load(open(f"{work}/summary.json"))
for tier, t in summary["plan"].items():
    for side in ("planned", "measured"):
        segs = {a["data-category"]: float(a["data-value"]) for tg, a, c in els
                if tg == "rect" and c == "chart-memory" and a.get("data-bar") == f"{tier} {side}"}
        want = {cat: float(v[side]) for cat, v in t["categories"].items()}
        if not any(float(v[s]) for v in t["categories"].values() for s in ("planned", "measured")):
            want = {}  # a tier the run did not use: no bars
        check(segs == want, f"memory bar '{tier} {side}': {segs} != {want}")

# ---- the comparison page: every chart over steps has one polyline per run ----
cmp = dom(f"{work}/compare.dom")
lines = {}
for t, a, c in cmp:
    if t == "polyline":
        lines.setdefault(c, []).append(a.get("data-series"))
check(len(lines) >= 4, f"the comparison page draws {len(lines)} charts over steps")
for c, series in lines.items():
    check(sorted(series) == ["run", "twin"], f"comparison chart {c}: series {series}, want one per run")
same = [(a.get("data-values"), c) for t, a, c in cmp if t == "polyline"]
for c in lines:
    vals = [v for v, cc in same if cc == c]
    check(len(set(vals)) == 1, f"comparison chart {c}: a run and its copy draw different values")

# ---- the plan page ----
els = dom(f"{work}/plan.dom")
plan = json.load(open(f"{work}/plan.json"))
check(not any(t == "script" for t, _, _ in els), "the plan page has a script")
for bar, cats in (("naive (device)", plan["naive"]["device"]["categories"]),
                  ("plan (device)", plan["plan"]["device"]["categories"]),
                  ("plan (host)", plan["plan"]["host"]["categories"])):
    segs = {a["data-category"]: int(a["data-value"]) for t, a, c in els
            if t == "rect" and c == "chart-plan" and a.get("data-bar") == bar}
    check(segs == cats, f"plan bar '{bar}': {segs} != {cats}")
labels = {a["data-bar"] for t, a, c in els if t == "text" and c == "chart-plan" and "bar-label" in a.get("class", "")}
check({"naive (device)", "plan (device)", "plan (host)"} <= labels, f"plan bar labels {labels}")
legend = {a["data-category"] for t, a, c in els if t == "text" and c == "chart-plan" and a.get("class") == "legend"}
want = set(plan["naive"]["device"]["categories"]) | set(plan["plan"]["device"]["categories"]) | set(plan["plan"]["host"]["categories"])
check(want <= legend, f"plan legend {legend} lacks some of {want}")
limit = [a for t, a, c in els if t == "line" and c == "chart-plan" and a.get("class") == "limit"]
check(len(limit) == 1 and int(limit[0]["data-value"]) == plan["usable_device_bytes"], "the usable device memory line")

# ---- the screenshot ----
png = open(f"{work}/report.png", "rb").read()
check(png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1200, 1600), "report.png is not a 1200 x 1600 PNG")

if failures:
    print("report_chromium: FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"report_chromium: the DOM Chromium rendered holds the run's {len(logged)} loss points, {len(evals)} evaluations, "
      f"{len(ckpts)} checkpoints, the transfer and memory series, and the plan's {len(want)} categories")
PY
