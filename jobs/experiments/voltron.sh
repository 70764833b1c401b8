#!/usr/bin/env bash
# Voltron on the emulated testbed (jobs/testbed/testbed.sh): a
# heterogeneous cluster of three device classes (a fast device, one 2x and two
# 4x slower: --slowdown 1,2,4,4, every rank a full core's quota; links 1 ms one
# way) with memory budgets that no single device meets (stories15M's also rule
# out tensor parallelism; hostfiles/cluster-voltron-*.json). Per model (stories15M with its real
# weights; the TinyLlama-1.1B shape in q4_0, synthetic weights: speed only):
#   1. meshinfer calibrate on the testbed's ranks (device regressions, links);
#   2. meshinfer plan --planner all on that calibration (the predictions);
#   3. generate on the testbed with each of: one device (the fast one, without
#      its budget: it does not fit), layerwise (MP), greedy, tp, somegather, hybrid (its
#      placements apart only when that pays), hybrid with the phases always apart, with
#      one placement for both phases (decode's, then prefill's), and
#      --planner auto: TTFT and TPOT measured against predicted, peak weights
#      and KV cache per device.
# Writes DIR/voltron.csv, voltron.md and voltron.png (predicted against
# measured), and DIR/cluster-<model>.json and plans-<model>.txt.
#
# usage: jobs/experiments/voltron.sh [--quick] [--replot] [--out DIR] [--steps N]
#   --quick   stories15M only
#   --replot  no runs: redraw voltron.md and voltron.png from DIR/voltron.csv
#   --steps N decoded tokens per run (default 64 for stories15M, 24 for TinyLlama)
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
out="$root/results/voltron"
quick=0 replot=0 steps=""
while (($#)); do
    case "$1" in
        --quick) quick=1; shift ;;
        --replot) replot=1; shift ;;
        --out) need_value "$@"; out=$2; shift 2 ;;
        --steps) need_value "$@"; opt_int "$1" "$2" 1 1000000; steps=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
command -v gnuplot >/dev/null || fail "gnuplot is not installed (apt-get install gnuplot-nox)"
command -v node >/dev/null || fail "node is not installed (apt-get install nodejs)"
TB=("$root/jobs/testbed/testbed.sh" --ranks 4 --cpu-pct 100 --slowdown 1,2,4,4 --delay-ms 1 --jitter-ms 0.1)
prompt="$(head -c 400 "$root/models/cache/moby-dick.txt" 2>/dev/null | tr '\n' ' ')"
if ((!replot)); then
    meshinfer_bin
    export MESHINFER_BIN="$bin"
    real_model
    stories=$model
    [[ -n "$prompt" ]] || prompt="$(head -c 400 "$root/models/cache/moby-dick.txt" | tr '\n' ' ')"
    tiny="$root/models/cache/tinyllama-synth-q4_0.h5"
    if ((!quick)) && [[ ! -f "$tiny" ]]; then
        say "writing the synthetic TinyLlama-shaped q4_0 model (seeded random weights)..."
        "$bin" synth --shape tinyllama-1.1b --dtype q4_0 --out "$tiny" >/dev/null
    fi
    out_dir "$out"
    csv="$out/voltron.csv.partial"
    echo "model,run,planner,fits,ttft_ms,predicted_ttft_ms,tpot_ms,predicted_tpot_ms,phase_switch_ms,max_device_mb,device_mb,note" > "$csv"
    models=("$stories|stories15M|$root/hostfiles/cluster-voltron-stories.json|${steps:-64}|")
    ((quick)) || models+=("$tiny|tinyllama-q4_0|$root/hostfiles/cluster-voltron-tinyllama.json|${steps:-24}|--kv-positions 256")
    for mm in "${models[@]}"; do
        IFS='|' read -r m label budgets n extra <<<"$mm"
        cal="$out/cluster-$label.json"
        say "$label: calibrating the testbed's 4 devices and 6 links..."
        "${TB[@]}" -- calibrate --cluster "$budgets" -m "$m" -o "$cal" > "$out/calibrate-$label.txt" 2> "$out/err" ||
            fail "calibrate: $(grep -m1 error "$out/err" || tail -1 "$out/err")"
        n_prompt=$("$bin" tokenize -m "$m" -p "$prompt" | wc -w)
        "$bin" plan -m "$m" --cluster "$cal" --planner all --prompt-tokens "$n_prompt" --steps "$n" $extra \
            > "$out/plans-$label.txt" 2>&1 || true
        one() { # run-label ranks slowdown planner [args...]
            local run=$1 ranks=$2 slow=$3 pl=$4; shift 4
            say "$label: $run"
            local rc=0
            "$root/jobs/testbed/testbed.sh" --ranks "$ranks" --cpu-pct 100 --slowdown "$slow" --delay-ms 1 --jitter-ms 0.1 -- \
                generate -m "$m" -n "$n" --ignore-eos -p "$prompt" --json --planner "$pl" "$@" > "$out/run.json" 2> "$out/err" || rc=$?
            if ((rc)); then
                local why; why=$(grep -m1 -o 'error: .*' "$out/err" || tail -1 "$out/err")
                grep -q "does not fit\|does not divide\|has only" "$out/err" || fail "$label $run: $why"
                say "  does not fit: ${why#error: }"
                echo "$label,$run,$pl,0,,,,,,,,\"${why//\"/}\"" >> "$csv"
                return
            fi
            node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
              const mb = j.ranks.map(r => (r.weight_bytes + r.kv_cache_bytes) / 1e6);
              const note = process.argv[4] || "";
              console.log([process.argv[2], process.argv[3], j.plan.planner, 1, j.ttft_ms, j.predicted_ttft_ms,
                           j.tpot_without_switch_ms, j.predicted_tpot_ms, j.phase_switch_ms, Math.max(...mb).toFixed(1),
                           mb.map(x => x.toFixed(1)).join("/"), note].join(","))' \
                "$out/run.json" "$label" "$run" "$( [[ $pl == auto ]] && grep -o 'planner auto: [a-z]*' "$out/err" | head -1)" >> "$csv"
        }
        # the fast device alone, its calibration, no budget (the model does not fit it: measured anyway)
        node -e 'const fs = require("fs"); const c = JSON.parse(fs.readFileSync(process.argv[1]));
          const d = c.devices[0]; d.mem_mb = 1e6; delete c.links;
          c.devices = [d]; c.calibration.n_ranks = 1; c.description = "device 0 of " + process.argv[1] + " alone, no budget";
          fs.writeFileSync(process.argv[2], JSON.stringify(c, null, 1))' "$cal" "$out/cluster-$label-single.json"
        one "single-device-over-budget" 1 1 layerwise --cluster "$out/cluster-$label-single.json" $extra
        for pl in layerwise greedy tp somegather hybrid; do
            one "$pl" 4 1,2,4,4 "$pl" --cluster "$cal" $extra
        done
        one "hybrid-phases-apart" 4 1,2,4,4 hybrid --cluster "$cal" --phase-plans both $extra
        one "hybrid-decode-placement-for-both" 4 1,2,4,4 hybrid --cluster "$cal" --phase-plans decode $extra
        one "hybrid-prefill-placement-for-both" 4 1,2,4,4 hybrid --cluster "$cal" --phase-plans prefill $extra
        one "auto" 4 1,2,4,4 auto --cluster "$cal" $extra
    done
    rm -f "$out/run.json" "$out/err"
    mv "$csv" "$out/voltron.csv"
fi
[[ -f "$out/voltron.csv" ]] || fail "no $out/voltron.csv (run without --replot first)"
node - "$out/voltron.csv" > "$out/voltron.md" <<'JS'
const lines = require("fs").readFileSync(process.argv[2], "utf8").trim().split("\n").slice(1);
const rows = lines.map(l => l.match(/("[^"]*"|[^,]*)(,|$)/g).map(x => x.replace(/,$/, "").replace(/^"|"$/g, "")));
const err = (m, p) => m > 0 && p > 0 ? `${(100 * (p - m) / m).toFixed(0)}%` : "";
let o = "| model | run | TTFT ms (predicted, error) | TPOT ms (predicted, error) | phase switch ms | MB per device |\n|---|---|---|---|---|---|\n";
for (const r of rows) {
  if (r[3] !== "1") { o += `| ${r[0]} | ${r[1]} | does not fit | | | ${r[11]} |\n`; continue; }
  const f = x => (+x).toFixed(1);
  o += `| ${r[0]} | ${r[1]}${r[11] ? " (" + r[11] + ")" : ""} | ${f(r[4])} (${f(r[5])}, ${err(+r[4], +r[5])}) | ${(+r[6]).toFixed(2)} (${(+r[7]).toFixed(2)}, ${err(+r[6], +r[7])}) | ${f(r[8])} | ${r[10]} |\n`;
}
process.stdout.write(o);
JS
node - "$out/voltron.csv" "$out/voltron.dat" <<'JS'
const fs = require("fs");
const lines = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").slice(1);
let o = "";
for (const k of [[4, 5], [6, 7]]) {
  for (const l of lines) {
    const r = l.split(",");
    if (r[3] === "1" && +r[k[1]] > 0) o += `${r[k[0]]} ${r[k[1]]} "${r[0]} ${r[1]}"\n`;
  }
  o += "\n\n";
}
fs.writeFileSync(process.argv[3], o);
JS
read -r ttft_lo ttft_hi tpot_lo tpot_hi < <(node -e 'const l = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").slice(1).map(x => x.split(",")).filter(r => r[3] === "1");
  const rng = (a, b) => { const v = l.flatMap(r => [+r[a], +r[b]]).filter(x => x > 0); return [Math.min(...v) * 0.7, Math.max(...v) * 1.4]; };
  console.log([...rng(4, 5), ...rng(6, 7)].join(" "))' "$out/voltron.csv")
plot_png "$out/voltron.png" "1100,480" ",10" <<GP
set multiplot layout 1,2 title "Voltron on the testbed: the calibrated cost model's prediction against the measurement (1 ms links; devices 1x, 2x, 4x, 4x slower)"
set grid
set logscale xy
set key top left font ",8"
set xlabel "measured (ms)"
set ylabel "predicted (ms)"
lo(i) = i == 0 ? $ttft_lo : $tpot_lo
hi(i) = i == 0 ? $ttft_hi : $tpot_hi
do for [i = 0:1] {
    set title (i == 0 ? "TTFT" : "TPOT (phase switch excluded)")
    set xrange [lo(i):hi(i)]; set yrange [lo(i):hi(i)]
    plot x title "exact" lc rgb "#888888", 1.15 * x title "+-15%" dt 2 lc rgb "#bbbbbb", 0.85 * x notitle dt 2 lc rgb "#bbbbbb", \
         "$out/voltron.dat" index i using 1:2:3 with labels point pt 7 offset 0.5,0.5 font ",7" left noenhanced notitle
}
unset multiplot
GP
rm -f "$out/voltron.dat"
cat "$out/voltron.md"
say "wrote $out/voltron.csv, voltron.md, voltron.png"
