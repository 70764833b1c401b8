#!/usr/bin/env bash
# CATS's latency question on the emulated testbed (jobs/testbed/testbed.sh): time
# per decoded token of somegather (pruning r = 0, 0.5, 0.9) against tp and
# layer-wise, on D = 2..6 devices (somegather where D divides the KV heads),
# for stories15M (real weights) and the TinyLlama-1.1B shape (synthetic
# q4_0 weights: speed only), on two kinds of link: 5 ms one way with no rate
# limit, and 5 ms on one shared 10 Mbit/s medium (a wireless channel all
# devices take turns on, where bytes cost time). Each device gets 40% of a
# core. For every run: TPOT, the cost model's calibrated prediction, link
# delays on the critical path, bytes per token, and where rank time goes
# (compute, communication, idle).
# Writes results/somegather_testbed/latency.csv, latency.md and latency.png.
#
# usage: jobs/experiments/somegather_testbed.sh [--quick] [--replot] [--out DIR]
#   --quick   stories15M only, unlimited rate only
#   --replot  no runs: redraw latency.md and latency.png from DIR/latency.csv
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
out="$root/results/somegather_testbed"
quick=0 replot=0
while (($#)); do
    case "$1" in
        --quick) quick=1; shift ;;
        --replot) replot=1; shift ;;
        --out) need_value "$@"; out=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
command -v gnuplot >/dev/null || fail "gnuplot is not installed (apt-get install gnuplot-nox)"
if ((replot)); then
    [[ -f "$out/latency.csv" ]] || fail "--replot: no $out/latency.csv (run without --replot first)"
else
    meshinfer_bin
    real_model
    stories=$model
    tiny="$root/models/cache/tinyllama-synth-q4_0.h5"
    if ((!quick)) && [[ ! -f "$tiny" ]]; then
        echo "somegather_testbed: writing the synthetic TinyLlama-shaped q4_0 model (seeded random weights)..." >&2
        "$bin" synth --shape tinyllama-1.1b --dtype q4_0 --out "$tiny" >/dev/null
    fi
    out_dir "$out"
    csv="$out/latency.csv.partial"
    echo "model,link,ranks,scheme,prune,tpot_ms,calibrated_ms,delays,bytes_per_token,compute_s,comm_s,idle_s" > "$csv"
    one() { # model label link-label rate D planner prune steps
        local m=$1 label=$2 link=$3 rate=$4 D=$5 p=$6 r=$7 n=$8 extra=()
        [[ $p == somegather && $r != 0 ]] && extra=(--prune "$r")
        say "$label, $link, D=$D, $p${extra[*]:+ r=$r}"
        if ! "$root/jobs/testbed/testbed.sh" --ranks "$D" --delay-ms 5 --jitter-ms 0 --rate-mbit "$rate" -- \
             generate -m "$m" -n "$n" --planner "$p" "${extra[@]}" --json > "$out/run.json" 2> "$out/err"; then
            grep -q "does not divide\|has only\|cut\|does not fit" "$out/err" && { say "  skipped: $(grep -o 'error: .*' "$out/err")"; return; }
            fail "$label $p on $D ranks: $(tail -1 "$out/err")"
        fi
        node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
          let c = 0, m = 0, i = 0;
          for (const r of j.ranks) { const s = r.seconds; c += s.attention + s.projection + s.ffn + s.logits; m += s.communication; i += s.idle; }
          const n = j.ranks.length;
          console.log([...process.argv.slice(2), j.tpot_ms, j.calibrated_token_ms, j.critical_path_delays,
                       j.plan.predicted_bytes_per_token, c / n, m / n, i / n].join(","))' \
            "$out/run.json" "$label" "$link" "$D" "$p" "$r" >> "$csv"
    }
    models=("$stories|stories15M|16")
    ((quick)) || models+=("$tiny|tinyllama-synth-q4_0|6")
    links=("unlimited|0")
    ((quick)) || links+=("10Mbit-shared|10")
    for mm in "${models[@]}"; do
        IFS='|' read -r m label n <<<"$mm"
        for ll in "${links[@]}"; do
            IFS='|' read -r link rate <<<"$ll"
            for D in 2 3 4 5 6; do
                one "$m" "$label" "$link" "$rate" "$D" layerwise 0 "$n"
                one "$m" "$label" "$link" "$rate" "$D" tp 0 "$n"
                for r in 0 0.5 0.9; do one "$m" "$label" "$link" "$rate" "$D" somegather "$r" "$n"; done
            done
        done
    done
    rm -f "$out/run.json" "$out/err"
    mv "$csv" "$out/latency.csv"
fi
node - "$out/latency.csv" > "$out/latency.md" <<'JS'
const rows = require("fs").readFileSync(process.argv[2], "utf8").trim().split("\n").slice(1).map(l => l.split(","));
let o = "";
const groups = [...new Set(rows.map(r => r[0] + "|" + r[1]))];
for (const g of groups) {
  const [model, link] = g.split("|");
  o += `\n${model}, links 5 ms one way, ${link === "unlimited" ? "no rate limit" : "one shared 10 Mbit/s medium"}; TPOT ms (calibrated prediction; communication share of rank time)\n\n`;
  const Ds = [...new Set(rows.filter(r => r[0] === model).map(r => +r[2]))].sort();
  const schemes = [["layerwise", "0"], ["tp", "0"], ["somegather", "0"], ["somegather", "0.5"], ["somegather", "0.9"]];
  o += "| D | " + schemes.map(([s, r]) => s === "somegather" ? `somegather r=${r}` : s).join(" | ") + " |\n";
  o += "|---|" + schemes.map(() => "---|").join("") + "\n";
  for (const D of Ds) {
    o += `| ${D} |`;
    for (const [s, r] of schemes) {
      const x = rows.find(q => q[0] === model && q[1] === link && +q[2] === D && q[3] === s && q[4] === r);
      if (!x) { o += " - |"; continue; }
      const share = +x[10] / (+x[9] + +x[10]);
      o += ` ${(+x[5]).toFixed(1)} (${(+x[6]).toFixed(1)}; ${(100 * share).toFixed(0)}%) |`;
    }
    o += "\n";
  }
}
process.stdout.write(o.trimStart());
JS
# one panel per model and link: TPOT against D, one line per scheme
node - "$out/latency.csv" "$out/latency.dat" <<'JS'
const fs = require("fs");
const rows = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").slice(1).map(l => l.split(","));
let o = "";
const groups = [...new Set(rows.map(r => r[0] + "|" + r[1]))];
for (const g of groups) {
  const [model, link] = g.split("|");
  for (const [s, r] of [["layerwise", "0"], ["tp", "0"], ["somegather", "0"], ["somegather", "0.5"], ["somegather", "0.9"]]) {
    for (const x of rows.filter(q => q[0] === model && q[1] === link && q[3] === s && q[4] === r)) o += `${x[2]} ${x[5]}\n`;
    o += "\n\n";
  }
}
fs.writeFileSync(process.argv[3], o);
JS
n_groups=$(cut -d, -f1,2 "$out/latency.csv" | tail -n +2 | sort -u | wc -l)
titles=$(cut -d, -f1,2 "$out/latency.csv" | tail -n +2 | awk '!seen[$0]++' | tr ',\n' '  ')
plot_png "$out/latency.png" "$((n_groups > 1 ? 1200 : 700)),$((n_groups > 2 ? 900 : 480))" ",10" <<GP
set multiplot layout $((n_groups > 2 ? 2 : 1)),$((n_groups > 1 ? 2 : 1)) title "time per token on the emulated testbed (5 ms links, 40% of a core per device)"
set logscale y
set grid
set xlabel "devices D"
set ylabel "ms per token"
set xrange [1.7:6.3]
set xtics 1
set key top left font ",9"
titles = "$titles"
do for [g = 0:$((n_groups - 1))] {
    set title word(titles, 2 * g + 1) . ", " . word(titles, 2 * g + 2) noenhanced
    plot "$out/latency.dat" index 5 * g + 0 using 1:2 with linespoints lw 2 pt 7 title "layer-wise", \
         "" index 5 * g + 1 using 1:2 with linespoints lw 2 pt 5 title "tp", \
         "" index 5 * g + 2 using 1:2 with linespoints lw 2 pt 9 title "somegather r=0", \
         "" index 5 * g + 3 using 1:2 with linespoints lw 2 pt 11 title "somegather r=0.5", \
         "" index 5 * g + 4 using 1:2 with linespoints lw 2 pt 13 title "somegather r=0.9"
}
unset multiplot
GP
rm -f "$out/latency.dat"
cat "$out/latency.md"
say "wrote $out/latency.csv, latency.md, latency.png"
