#!/usr/bin/env bash
# Seed 003's communication scaling (issue 10 item 4, part) on the emulated
# testbed: tp on 3 ranks decodes 900 tokens of the stories42M shape
# (synthetic weights: speed only) over one shared medium of 400 Mbit/s that
# drops to 40 Mbit/s 5 s into the run and recovers at 13 s (jobs/testbed.sh
# --at), once with --tpot-ms 30 (the controller lowers the wire dtype of
# activation messages when TPOT crosses the target and probes back up when
# it has room) and once without. Writes DIR/scaling.csv (per token: ms with
# and without scaling, the wire dtype), scaling.md (TPOT before, during and
# after, the decisions with their cost) and scaling.png.
#
# usage: jobs/scaling.sh [--out DIR]
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"
    exit 0
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${MESHINFER_BIN:-$root/build/meshinfer}"
out="$root/results/scaling"
fail() { echo "scaling: error: $*" >&2; exit 1; }
while (($#)); do
    case "$1" in
        --out) (($# >= 2)) || fail "--out needs a value"; out=$2; shift 2 ;;
        *) fail "unknown option '$1' (see --help)" ;;
    esac
done
command -v gnuplot >/dev/null || fail "gnuplot is not installed (apt-get install gnuplot-nox)"
[[ -x "$bin" ]] || { "$root/jobs/build.sh"; bin="$root/build/meshinfer"; }
export MESHINFER_BIN="$bin"
model="$root/models/cache/stories42M-synth.h5"
[[ -f "$model" ]] || "$bin" synth --shape stories42M --out "$model" >/dev/null
mkdir -p "$out"
run() { # label extra-args...
    local label=$1; shift
    echo "scaling: $label..." >&2
    "$root/jobs/testbed.sh" --ranks 3 --cpu-pct 100 --delay-ms 0 --jitter-ms 0 --rate-mbit 400 \
        --at 5:link=0/40 --at 13:link=0/400 -- \
        generate -m "$model" --planner tp -n 900 --ignore-eos --json "$@" > "$out/$label.json" 2> "$out/$label.err" ||
        fail "$label: $(grep -m1 error "$out/$label.err" || tail -1 "$out/$label.err")"
}
run scaled --tpot-ms 30
run fixed
node - "$out/scaled.json" "$out/fixed.json" "$out/scaled.err" "$out" <<'JS'
const fs = require("fs");
const [sj, fj, serr, out] = process.argv.slice(2);
const s = JSON.parse(fs.readFileSync(sj)), f = JSON.parse(fs.readFileSync(fj));
const ts = s.scaling.token_ms, tf = f.scaling.token_ms, dec = s.scaling.decisions;
// the wire dtype in force at each token
let wire = "fp32", di = 0, csv = "token,scaled_ms,fixed_ms,wire\n";
for (let i = 0; i < Math.min(ts.length, tf.length); i++) {
  while (di < dec.length && dec[di].token <= i) wire = dec[di++].wire_to;
  csv += `${i + 1},${ts[i]},${tf[i]},${wire}\n`;
}
fs.writeFileSync(out + "/scaling.csv", csv);
// the link changes are by time; find the tokens where they fell from the cumulative step times
const at = (t, T) => { let c = 0; for (let i = 0; i < t.length; i++) { c += t[i] / 1e3; if (c >= T) return i; } return t.length; };
const phases = (t, ttft) => { const a = at(t, 5 - ttft / 1e3 - 0.5), b = at(t, 13 - ttft / 1e3 - 0.5); return [[0, a], [a, b], [b, t.length]]; };
const mean = (t, [a, b]) => { const x = t.slice(a, b); return x.reduce((p, q) => p + q, 0) / Math.max(1, x.length); };
let md = "| run | TPOT before (400 Mbit/s) | during (40 Mbit/s) | after (400 Mbit/s) |\n|---|---|---|---|\n";
for (const [name, j] of [["with --tpot-ms 30", s], ["without scaling (fp32)", f]]) {
  const t = j.scaling.token_ms, p = phases(t, j.ttft_ms);
  md += `| ${name} | ${mean(t, p[0]).toFixed(1)} ms | ${mean(t, p[1]).toFixed(1)} ms | ${mean(t, p[2]).toFixed(1)} ms |\n`;
}
md += "\n| after token | trigger | messages | decided in | installed in |\n|---|---|---|---|---|\n";
for (const d of dec) md += `| ${d.token} | ${d.trigger} | ${d.wire_from} -> ${d.wire_to} | ${d.decide_us.toFixed(0)} us | ${d.apply_ms.toFixed(1)} ms |\n`;
md += `\nThe phases are told apart by the run's own clock (the link changes at 5 s and 13 s of the testbed's run; about 0.5 s of start-up and the prompt come first).\n`;
fs.writeFileSync(out + "/scaling.md", md);
JS
gnuplot <<GP
set terminal pngcairo size 1000,420 font ",10"
set output "$out/scaling.png.partial"
set datafile separator ","
set title "seed 003 communication scaling on the testbed: tp, 3 ranks, stories42M shape; shared medium 400 -> 40 -> 400 Mbit/s"
set xlabel "decoded token"
set ylabel "ms per token"
set grid
set key top right
set yrange [0:*]
plot "$out/scaling.csv" every ::1 using 1:3 with lines lc rgb "#bbbbbb" title "fp32 messages throughout", \
     "$out/scaling.csv" every ::1 using 1:2 with lines lc rgb "#1f77b4" title "--tpot-ms 30 (wire dtype lowered and restored)", \
     30 with lines dt 2 lc rgb "#d62728" title "target"
GP
mv "$out/scaling.png.partial" "$out/scaling.png"
cat "$out/scaling.md"
echo "scaling: wrote $out/scaling.csv, scaling.md, scaling.png" >&2
