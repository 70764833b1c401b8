#!/usr/bin/env bash
# What CATS's pruning and message loss cost a real language model:
# stories15M's perplexity under somegather on D ranks (default 3) for
#   pruning: r in {0, 0.25, 0.5, 0.75, 0.9} of every rank's columns in all four
#     exchanges, communication-aware (columns ranked by the weights they feed
#     on the other ranks; their owner keeps them) against ordinary magnitude
#     pruning (ranked by all the weights they feed, dropped for every rank) at
#     the same bandwidth; and r = 0.5 in one exchange kind at a time;
#   message loss: P in {0, 1, 3, 5, 10}% in each of the three modes (link,
#     receiver, sender), several loss seeds: mean and spread.
# The model was not trained with pruning or message dropout (the seed retrains
# for both), so this is what a pre-trained model loses without that.
#   in-distribution text: stories the fp32 model samples itself (as
#     jobs/experiments/precision_quality.sh makes them), all of it
#   out-of-distribution text: Moby Dick chapters 1-3, the first 1024 tokens
# Writes results/somegather/quality.csv, quality.md, pruning.png and loss.png
# and prints the tables.
# --for-auto instead measures only communication-aware pruning on the
# in-distribution text at r in {0, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 0.9} and
# writes DIR/somegather-quality-D.json, the file `--planner auto --ppl-budget
# PCT --somegather-quality FILE` chooses somegather's pruning ratio from
# (about a minute on 3 ranks).
#
# usage: jobs/experiments/somegather_quality.sh [--ranks D] [--seeds N] [--model FILE] [--out DIR] [--for-auto]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
model=""
out="$root/results/somegather"
ranks=3 seeds=5 for_auto=0
while (($#)); do
    case "$1" in
        --ranks|--seeds|--model|--out) need_value "$@" ;;&
        --ranks) ranks=$2; shift 2 ;;
        --seeds) seeds=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --for-auto) for_auto=1; shift ;;
        *) bad_option "$1" ;;
    esac
done
opt_int --ranks "$ranks" 1 256
opt_int --seeds "$seeds" 1 1000
[[ -z $model ]] || opt_file --model "$model"
meshinfer_bin
real_model
moby="$root/models/cache/moby-dick.txt"
[[ -f "$moby" ]] || "$root/jobs/dev/fetch_references.sh" >/dev/null
command -v gnuplot >/dev/null || fail "gnuplot is not installed (apt-get install gnuplot-nox)"
out_dir "$out"

# the in-distribution text, sampled as precision_quality.sh samples it (and shared with it)
cache="$root/results/precision/cache-$(basename "$model" .h5)-$(stat -c %s "$model")"
stories="$cache/own-stories.txt"
mkdir -p "$cache"
"$root/jobs/lib/sample_stories.sh" "$bin" "$model" "$stories" 101 116

if ((for_auto)); then
    json="$out/somegather-quality-$ranks.json"
    pts=()
    for r in 0 0.01 0.02 0.05 0.1 0.25 0.5 0.9; do
        say "pruning r = $r on $ranks ranks..."
        mpi -np "$ranks" "$bin" perplexity -m "$model" --text "$stories" --planner somegather --prune "$r" --json \
            > "$out/run.json" 2>"$out/err" || fail "perplexity --prune $r: $(tail -1 "$out/err")"
        pts+=("$r" "$(json "$out/run.json" j.perplexity)")
    done
    tokens=$(json "$out/run.json" j.tokens)
    rm -f "$out/run.json" "$out/err"
    "$bin" info -m "$model" --json > "$out/info.json" 2>/dev/null || fail "meshinfer info -m $model failed"
    node - "$out/info.json" "$ranks" "$tokens" "${pts[@]}" > "$json.partial" <<'JS'
const fs = require("fs");
const [info, ranks, tokens, ...pts] = process.argv.slice(2);
const c = JSON.parse(fs.readFileSync(info));
const points = [];
for (let i = 0; i < pts.length; i += 2) points.push({r: +pts[i], perplexity: +pts[i + 1]});
console.log(JSON.stringify({model: c.name, n_layers: c.n_layers, dim: c.dim, ranks: +ranks, prune_mode: "aware",
  text: "stories the model samples itself (jobs/experiments/precision_quality.sh's)", tokens: +tokens, points}, null, 1));
JS
    rm -f "$out/info.json"
    mv "$json.partial" "$json"
    cat "$json"
    say "wrote $json"
    exit 0
fi

csv="$out/quality.csv.partial"
echo "study,mode,value,seed,text,tokens,mean_nll,perplexity,bytes_per_token" > "$csv"
# one perplexity run: study mode value seed -- meshinfer options
run() {
    local study=$1 mode=$2 value=$3 seed=$4; shift 5
    for text in stories moby; do
        local file=$stories max=()
        [[ $text == moby ]] && { file=$moby; max=(--max-tokens 1024); }
        mpi -np "$ranks" "$bin" perplexity -m "$model" --text "$file" "${max[@]}" --planner somegather --json \
            "$@" > "$out/run.json" 2>"$out/err" || fail "perplexity $*: $(tail -1 "$out/err")"
        node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
          console.log([process.argv.slice(2).join(","), j.tokens, j.mean_nll, j.perplexity,
                       j.plan.predicted_bytes_per_token].join(","))' "$out/run.json" \
            "$study" "$mode" "$value" "$seed" "$text" >> "$csv"
    done
}
say "pruning on $ranks ranks..."
for mode in aware magnitude; do
    for r in 0 0.25 0.5 0.75 0.9; do run pruning "$mode" "$r" 0 -- --prune "$r" --prune-mode "$mode"; done
done
for kind in attn_in heads ffn_in hidden; do run pruning-one "$kind" 0.5 0 -- --prune "$kind=0.5"; done
say "message loss on $ranks ranks ($seeds seeds)..."
for mode in link receiver sender; do
    for p in 0.01 0.03 0.05 0.10; do
        for s in $(seq 1 "$seeds"); do run loss "$mode" "$p" "$s" -- --loss "$p" --loss-mode "$mode" --loss-seed "$s"; done
    done
done
rm -f "$out/run.json" "$out/err"
mv "$csv" "$out/quality.csv"

# tables (Markdown) and figures
node - "$out/quality.csv" "$ranks" > "$out/quality.md" <<'JS'
const [csvPath, ranks] = process.argv.slice(2);
const rows = require("fs").readFileSync(csvPath, "utf8").trim().split("\n").slice(1).map(l => {
  const [study, mode, value, seed, text, tokens, nll, ppl, bytes] = l.split(",");
  return {study, mode, value: +value, seed: +seed, text, ppl: +ppl, bytes: +bytes};
});
const pick = (f) => rows.filter(f);
const fmt = (x) => x >= 1000 ? x.toFixed(0) : x >= 100 ? x.toFixed(1) : x.toFixed(2);
const base = (t) => pick(r => r.study === "pruning" && r.mode === "aware" && r.value === 0 && r.text === t)[0].ppl;
let o = `Perplexity of stories15M under somegather on ${ranks} ranks (own stories: in-distribution; Moby Dick: out of distribution; no retraining)\n\n`;
o += "| pruned r | bytes/token | aware, stories | magnitude, stories | aware, Moby Dick | magnitude, Moby Dick |\n|---|---|---|---|---|---|\n";
for (const r of [0, 0.25, 0.5, 0.75, 0.9]) {
  const g = (m, t) => pick(x => x.study === "pruning" && x.mode === m && x.value === r && x.text === t)[0];
  o += `| ${r} | ${g("aware", "stories").bytes} | ${fmt(g("aware", "stories").ppl)} | ${fmt(g("magnitude", "stories").ppl)} | ${fmt(g("aware", "moby").ppl)} | ${fmt(g("magnitude", "moby").ppl)} |\n`;
}
o += "\nOne exchange kind pruned at r = 0.5 (communication-aware):\n\n| exchange | stories | Moby Dick |\n|---|---|---|\n";
for (const k of ["attn_in", "heads", "ffn_in", "hidden"]) {
  const g = (t) => pick(x => x.study === "pruning-one" && x.mode === k && x.text === t)[0].ppl;
  o += `| ${k} | ${fmt(g("stories"))} | ${fmt(g("moby"))} |\n`;
}
o += `\nMessage loss (mean ± standard deviation over seeds; P = 0: ${fmt(base("stories"))} / ${fmt(base("moby"))}):\n\n`;
o += "| loss P | link, stories | receiver, stories | sender, stories | link, Moby Dick | receiver, Moby Dick | sender, Moby Dick |\n|---|---|---|---|---|---|---|\n";
const stat = (m, p, t) => {
  const v = pick(x => x.study === "loss" && x.mode === m && Math.abs(x.value - p) < 1e-9 && x.text === t).map(x => x.ppl);
  const mean = v.reduce((a, b) => a + b, 0) / v.length;
  const sd = Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, v.length - 1));
  return `${fmt(mean)} ± ${fmt(sd)}`;
};
for (const p of [0.01, 0.03, 0.05, 0.10]) {
  o += `| ${(p * 100).toFixed(0)}% |`;
  for (const t of ["stories", "moby"]) for (const m of ["link", "receiver", "sender"]) o += ` ${stat(m, p, t)} |`;
  o += "\n";
}
process.stdout.write(o);
JS
# gnuplot data: pruning lines and loss means with spread
node - "$out/quality.csv" "$out" <<'JS'
const [csvPath, dir] = process.argv.slice(2);
const fs = require("fs");
const rows = fs.readFileSync(csvPath, "utf8").trim().split("\n").slice(1).map(l => l.split(","));
let p = "";
for (const m of ["aware", "magnitude"]) {
  for (const r of rows.filter(x => x[0] === "pruning" && x[1] === m && x[4] === "stories"))
    p += `${r[2]} ${r[7]} ${rows.find(x => x[0] === "pruning" && x[1] === m && x[2] === r[2] && x[4] === "moby")[7]}\n`;
  p += "\n\n";
}
fs.writeFileSync(`${dir}/pruning.dat`, p);
let q = "";
const base = rows.find(x => x[0] === "pruning" && x[1] === "aware" && x[2] === "0" && x[4] === "stories")[7];
for (const m of ["link", "receiver", "sender"]) {
  q += `0 ${base} 0\n`;
  for (const pv of ["0.01", "0.03", "0.05", "0.10"]) {
    const v = rows.filter(x => x[0] === "loss" && x[1] === m && x[2] === pv && x[4] === "stories").map(x => +x[7]);
    const mean = v.reduce((a, b) => a + b, 0) / v.length;
    const sd = Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, v.length - 1));
    q += `${+pv * 100} ${mean} ${sd}\n`;
  }
  q += "\n\n";
}
fs.writeFileSync(`${dir}/loss.dat`, q);
JS
plot_png "$out/pruning.png" "900,560" ",11" <<GP
set title "somegather on $ranks ranks, stories15M (no retraining): pruning at equal bandwidth"
set xlabel "fraction r of each rank's columns never sent (all four exchanges)"
set ylabel "perplexity"
set logscale y
set grid
set key top left
plot "$out/pruning.dat" index 0 using 1:2 with linespoints lw 2 pt 7 title "communication-aware, own stories", \
     "" index 1 using 1:2 with linespoints lw 2 pt 5 title "ordinary magnitude, own stories", \
     "" index 0 using 1:3 with linespoints lw 2 pt 6 dt 2 title "communication-aware, Moby Dick", \
     "" index 1 using 1:3 with linespoints lw 2 pt 4 dt 2 title "ordinary magnitude, Moby Dick"
set output "$out/loss.png.partial"
set title "somegather on $ranks ranks, stories15M (no dropout training): message loss, own stories"
set xlabel "messages lost (%)"
set ylabel "perplexity (mean and standard deviation over seeds)"
set key top left
plot "$out/loss.dat" index 0 using 1:2:3 with yerrorlines lw 2 pt 7 title "link: j misses i", \
     "" index 1 using 1:2:3 with yerrorlines lw 2 pt 5 title "receiver: j gets nothing", \
     "" index 2 using 1:2:3 with yerrorlines lw 2 pt 9 title "sender: nobody gets i"
GP
rm -f "$out/pruning.dat" "$out/loss.dat"
cat "$out/quality.md"
say "wrote $out/quality.csv, quality.md, pruning.png, loss.png"
