#!/usr/bin/env bash
# CATS Q2 (Fig. 6) for its own workload on the emulated testbed
# (jobs/testbed/testbed.sh): time per forecast of the time-series model
# (docs/patchtst.md) split by somegather over D = 4, 8, 16 devices, pruning
# r = 0 and 0.9, against the whole model on one device, and the share of
# rank time spent communicating (CATS measured 69-91% on nRF52840s).
# Devices are microcontroller-like: every compute op is made SLOWDOWN times
# slower (default 50: a 64 MHz Cortex-M4 against one core here is slower
# still; the figure is the shape, not the absolute time) inside a CPU quota
# of CPU% of a core, and every packet crosses one shared medium of RATE Mbit/s
# (default 1, BLE's 1M PHY) with DELAY ms one way (default 2); activations
# travel as q8_0 (--wire-dtype; CATS's devices exchange int8). The model is
# synthetic (seeded weights: time does not depend on their values) unless
# --model names a trained one.
# Writes OUT/latency.csv, OUT/latency.md and OUT/latency.png.
#
# usage: jobs/experiments/series_testbed.sh [--out DIR] [--model MODEL.h5] [--slowdown S] [--cpu-pct P]
#                               [--rate-mbit R] [--delay-ms D] [--devices "4 8 16"] [--windows N]
#                               [--wire-dtype fp32|fp16|q8_0]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
out="$root/results/series" model="" slowdown=50 cpu=25 rate=1 delay=2 devices="4 8 16" windows=4 wire=q8_0
while (($#)); do
    need_value "$@"
    case "$1" in
        --out) out=$2 ;;
        --model) model=$2 ;;
        --slowdown) opt_num "$1" "$2" 1 1000; slowdown=$2 ;; # (the testbed's ranges)
        --cpu-pct) opt_int "$1" "$2" 1 100; cpu=$2 ;;
        --rate-mbit) opt_num "$1" "$2" 0 1000000; rate=$2 ;;
        --delay-ms) opt_num "$1" "$2" 0 60000; delay=$2 ;;
        --devices) opt_ints "$1" "$2" 1 256; devices=${2//,/ } ;;
        --windows) opt_int "$1" "$2" 1 1000000; windows=$2 ;;
        --wire-dtype) [[ $2 =~ ^(fp32|fp16|q8_0)$ ]] || arg_fail "--wire-dtype '$2' is not fp32, fp16 or q8_0"; wire=$2 ;;
        *) bad_option "$1" ;;
    esac
    shift 2
done
[[ -z $model ]] || opt_file --model "$model"
((EUID == 0)) || fail "the testbed needs root (cgroups, iptables)"
meshinfer_bin
command -v gnuplot > /dev/null || fail "gnuplot is not installed (apt-get install gnuplot-nox)"
out_dir "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [[ -z $model ]]; then
    model="$tmp/patchtst-synthetic.h5"
    "$bin" synth --shape patchtst --out "$model" > /dev/null
    label="patchtst-synthetic"
else
    [[ -f $model ]] || fail "$model: no such model"
    label=$(basename "$model" .h5)
fi
channels=$("$bin" info -m "$model" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).n_channels||3))')
# a series of the model's channel count, 24 * windows rows past the look-back, with its split
node -e '
  const [C, W] = process.argv.slice(1).map(Number), rows = 96 + 24 * W;
  let o = Array.from({length: C}, (_, j) => "c" + j).join(",") + "\n";
  for (let i = 0; i < rows; i++) o += Array.from({length: C}, (_, j) => Math.sin(i / (5 + j)).toFixed(5)).join(",") + "\n";
  process.stdout.write(o);' "$channels" "$windows" > "$tmp/s.csv"
echo "{\"train\": [0, 96], \"test\": [96, $((96 + 24 * windows))]}" > "$tmp/split.json"
csv="$out/latency.csv.partial"
echo "model,D,prune,forecast_ms,compute_s,comm_s,idle_s,comm_share,bytes_sent" > "$csv"
one() { # D PRUNE
    local D=$1 r=$2 extra=()
    [[ $r != 0 ]] && extra=(--prune "$r")
    ((D > 1)) && extra+=(--wire-dtype "$wire")
    say "D=$D r=$r (slowdown $slowdown, $cpu% of a core, $rate Mbit/s shared, $delay ms)"
    "$root/jobs/testbed/testbed.sh" --ranks "$D" --cpu-pct "$cpu" --slowdown "$slowdown" --delay-ms "$delay" --jitter-ms 0 \
        --rate-mbit "$rate" -- forecast -m "$model" --series "$tmp/s.csv" --split "$tmp/split.json" "${extra[@]}" \
        --json > "$tmp/run.json" 2> "$tmp/err" || fail "D=$D r=$r: $(grep -m1 error "$tmp/err" || tail -1 "$tmp/err")"
    node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
      let c = 0, m = 0, i = 0, b = 0;
      for (const r of j.ranks) { const s = r.seconds; c += s.attention + s.projection + s.ffn + s.logits; m += s.communication; i += s.idle; b += r.bytes_sent || 0; }
      const n = j.ranks.length;
      console.log([...process.argv.slice(2), j.forecast_ms, c / n, m / n, i / n, n > 1 ? m / (c + m) : 0, b].join(","))' \
        "$tmp/run.json" "$label" "$D" "$r" >> "$csv"
}
one 1 0
for D in $devices; do
    one "$D" 0
    one "$D" 0.9
done
mv "$csv" "$out/latency.csv"
node - "$out/latency.csv" > "$tmp/latency.md" <<'JS'
const rows = require("fs").readFileSync(process.argv[2], "utf8").trim().split("\n").slice(1).map(l => l.split(","));
const one = rows.find(r => r[1] === "1");
let o = `| D | r | ms per forecast | speed-up vs one device | communication share of rank time |\n|---|---|---|---|---|\n`;
for (const r of rows)
  o += `| ${r[1]} | ${r[2]} | ${(+r[3]).toFixed(1)} | ${(+one[3] / +r[3]).toFixed(2)} | ${r[1] === "1" ? "-" : (100 * +r[7]).toFixed(0) + "%"} |\n`;
process.stdout.write(o);
JS
awk -F, 'NR > 1 && $3 == 0 {print $2, $4, 100 * $8}' "$out/latency.csv" > "$tmp/r0.dat"
awk -F, 'NR > 1 && ($3 == 0.9 || $2 == 1) {print $2, $4, 100 * $8}' "$out/latency.csv" > "$tmp/r9.dat"
plot_png "$tmp/latency.png" "1000,420" ",10" <<GP
set multiplot layout 1,2 title "time-series model on the emulated testbed: compute ${slowdown}x slower, ${cpu}% of a core, ${rate} Mbit/s shared, ${delay} ms, ${wire} messages"
set grid
set xlabel "devices D"
set logscale x 2
set xtics (1, 4, 8, 16)
set ylabel "ms per forecast (one channel)"
plot "$tmp/r0.dat" using 1:2 with linespoints lw 2 title "somegather r = 0", \
     "$tmp/r9.dat" using 1:2 with linespoints lw 2 title "somegather r = 0.9"
set ylabel "communication, % of rank time"
set yrange [0:100]
plot "$tmp/r0.dat" using 1:3 with linespoints lw 2 title "r = 0", "$tmp/r9.dat" using 1:3 with linespoints lw 2 title "r = 0.9"
unset multiplot
GP
mv "$tmp/latency.md" "$out/latency.md" # written whole, then moved
mv "$tmp/latency.png" "$out/latency.png"
say "wrote $out/latency.{csv,md,png}"
cat "$out/latency.md"
