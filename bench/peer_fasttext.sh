#!/usr/bin/env bash
# leanemb against fastText 0.9.2 (Debian's `fasttext`) on the Debian package-description dataset
# (scripts/debian_text_dataset.py), same split and the same hyper-parameters: epochs 5, dim 100,
# word n-grams 2, 2M buckets, lr 0.1 (linear decay), softmax loss, 2 threads.
#   fasttext     fasttext supervised ... ; fasttext test (P@1)
#   leanemb_fp32 examples/text_debian.toml as is: fp32 rows, SGD
#   leanemb_lean bf16 rows + SGD (the text lean mode of docs/accuracy.md: half the row bytes, no
#                optimizer state, at parity with fp32 SGD at the same rate), rows on first touch
#                (a dynamic table of 2^18 rows)
#   leanemb_bf16 bf16 rows + SGD in a static table of all words + 2M buckets (what the dynamic
#                table saves)
# All at fastText's lr 0.1; the lean mode's best rate on this data is 1.0, as fp32's
# (docs/accuracy.md; examples/text_debian.toml names that variant).
# The three run one after another, REPEAT times (rounds alternate the order; round r uses seed r
# in every tool), on an otherwise quiet machine. Wall time and peak RSS come from /usr/bin/time for every process alike; P@1 from
# `fasttext test` and from leanemb's eval. Writes JSON with every run and the medians.
#
#   bench/peer_fasttext.sh [LEANEMB_BINARY] [OUT_JSON] [REPEAT]
set -euo pipefail
LEANEMB=${1:-build/release/leanemb}
OUT=${2:-bench/results/peer_fasttext.json}
REPEAT=${3:-3}
DATA=data/debian-text
command -v fasttext > /dev/null || { echo "peer_fasttext: fasttext not installed (scripts/install_deps.sh --tests)" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "peer_fasttext: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }
if [[ ! -s $DATA/train.txt || ! -s $DATA/test.txt ]]; then
  /usr/bin/python3 scripts/debian_text_dataset.py "$DATA"
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/leanemb_ft.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

BF16=(--set embedding.dtype=bf16 --set embedding.optimizer=sgd --set embedding.learning_rate=0.1)
LEAN=("${BF16[@]}" --set embedding.dynamic=true --set embedding.dynamic_rows=262144)

run_fasttext() {  # round
  /usr/bin/time -f "%e %M" -o "$WORK/fasttext-$1.time" fasttext supervised -input "$DATA/train.txt" \
    -output "$WORK/ft-$1" -epoch 5 -dim 100 -wordNgrams 2 -bucket 2000000 -lr 0.1 -loss softmax -thread 2 \
    -verbose 0 -seed "$1"
  fasttext test "$WORK/ft-$1.bin" "$DATA/test.txt" > "$WORK/fasttext-$1.test"
  # P@1 to full precision (`fasttext test` prints 3 decimals): the top label of each line.
  fasttext predict "$WORK/ft-$1.bin" "$DATA/test.txt" 1 > "$WORK/fasttext-$1.pred"
  rm -f "$WORK/ft-$1.bin" "$WORK/ft-$1.vec"
}
run_leanemb() {  # name round args...
  local name=$1 round=$2; shift 2
  /usr/bin/time -f "%e %M" -o "$WORK/$name-$round.time" "$LEANEMB" train --config examples/text_debian.toml --quiet \
    --set train.seed="$round" "$@" --json-summary "$WORK/$name-$round.json" > /dev/null
}
for ((r = 1; r <= REPEAT; r++)); do
  echo "peer_fasttext: round $r of $REPEAT" >&2
  if ((r % 2)); then
    run_fasttext "$r"; run_leanemb leanemb_fp32 "$r"; run_leanemb leanemb_lean "$r" "${LEAN[@]}"
    run_leanemb leanemb_bf16 "$r" "${BF16[@]}"
  else
    run_leanemb leanemb_bf16 "$r" "${BF16[@]}"; run_leanemb leanemb_lean "$r" "${LEAN[@]}"
    run_leanemb leanemb_fp32 "$r"; run_fasttext "$r"
  fi
done

/usr/bin/python3 - "$WORK" "$OUT" "$REPEAT" "$DATA" <<'EOF'
import json, statistics, sys
work, out, repeat, data = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
runs = {"fasttext": [], "leanemb_fp32": [], "leanemb_lean": [], "leanemb_bf16": []}
LEANEMB = ("leanemb_fp32", "leanemb_lean", "leanemb_bf16")
for r in range(1, repeat + 1):
    for name in runs:
        wall, rss_kb = open(f"{work}/{name}-{r}.time").read().split()[-2:]
        run = {"round": r, "wall_s": float(wall), "peak_rss_bytes": int(rss_kb) * 1024}
        if name == "fasttext":
            fields = dict(l.split("\t") for l in open(f"{work}/fasttext-{r}.test").read().split("\n") if "\t" in l)
            gold = [set(t[9:] for t in l.split() if t.startswith("__label__"))
                    for l in open(f"{data}/test.txt") if any(t.startswith("__label__") for t in l.split())]
            pred = [l.strip()[9:] for l in open(f"{work}/fasttext-{r}.pred")]
            assert len(gold) == len(pred) == int(fields["N"]), "fasttext predict and test disagree on the line count"
            correct = sum(p in g for p, g in zip(pred, gold))
            run.update(p_at_1=correct / len(pred), p_at_1_printed=float(fields["P@1"]), r_at_1=float(fields["R@1"]),
                       examples=int(fields["N"]))
        else:
            s = json.load(open(f"{work}/{name}-{r}.json"))
            run.update(p_at_1=s["eval"]["precision_at_1"], r_at_1=s["eval"]["recall_at_1"], examples=s["eval"]["examples"],
                       train_s=s["train_seconds"], table_bytes=s["table_bytes"], table_rows=s["table_rows"],
                       row_dtype=s["row_dtype"], row_optimizer=s["row_optimizer"], dynamic_rows=s.get("dynamic_rows"))
        runs[name].append(run)
med = {n: {k: statistics.median(x[k] for x in v) for k in ("p_at_1", "wall_s", "peak_rss_bytes")} for n, v in runs.items()}
ft = med["fasttext"]
res = {
    "what": "fastText 0.9.2 vs leanemb, Debian package descriptions -> Section, same split and hyper-parameters "
            "(epoch 5, dim 100, wordNgrams 2, bucket 2000000, lr 0.1, softmax, 2 threads); medians over rounds",
    "dataset": json.load(open(f"{data}/meta.json")),
    "runs": runs,
    "median": med,
    "p_at_1_by_round": {n: [x["p_at_1"] for x in v] for n, v in runs.items()},
    "p_at_1_minus_fasttext": {n: med[n]["p_at_1"] - ft["p_at_1"] for n in LEANEMB},
    "peak_rss_ratio_vs_fasttext": {n: med[n]["peak_rss_bytes"] / ft["peak_rss_bytes"] for n in LEANEMB},
    "wall_time_ratio_vs_fasttext": {n: med[n]["wall_s"] / ft["wall_s"] for n in LEANEMB},
}
with open(out, "w") as f:
    json.dump(res, f, indent=2)
for n in runs:
    print(f"{n:13s} P@1 {med[n]['p_at_1']:.4f} (rounds: {' '.join(f'{x:.4f}' for x in res['p_at_1_by_round'][n])})  wall {med[n]['wall_s']:6.2f} s  peak RSS {med[n]['peak_rss_bytes'] / 2**20:7.1f} MiB")
for n in LEANEMB:
    print(f"{n}: P@1 - fastText {res['p_at_1_minus_fasttext'][n]:+.4f}, RSS ratio {res['peak_rss_ratio_vs_fasttext'][n]:.3f}, "
          f"time ratio {res['wall_time_ratio_vs_fasttext'][n]:.3f}")
print(f"wrote {out}")
EOF
