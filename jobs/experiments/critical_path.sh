#!/usr/bin/env bash
# Link delays on a decoded token's critical path, per scheme, on the emulated
# testbed (jobs/testbed/testbed.sh: stories15M, RANKS ranks at CPU% of a core, no
# jitter): every planner decodes at two one-way delays D1 and D2; the TPOT's
# growth per millisecond of delay is the number of one-way delays a token
# really waits for, held against the count its programs' data dependencies
# need (`meshinfer plan` and the cost model, cost.h mi_predict_delays). At
# D1 the TPOT is also held against the cost model's calibrated prediction
# (each rank's measured weight-streaming rate and the measured round trips,
# no margin).
# Writes results/critical_path/critical_path.csv and .md and prints the table.
#
# usage: jobs/experiments/critical_path.sh [--ranks N] [--cpu-pct P] [--delays D1,D2] [--steps N] [--out DIR]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
model=""
out="$root/results/critical_path"
ranks=3 cpu=40 delays=5,10 steps=24
while (($#)); do
    case "$1" in
        --ranks|--cpu-pct|--delays|--steps|--out) need_value "$@" ;;&
        --ranks) ranks=$2; shift 2 ;;
        --cpu-pct) cpu=$2; shift 2 ;;
        --delays) delays=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
opt_int --ranks "$ranks" 2 9
opt_int --cpu-pct "$cpu" 1 100
opt_int --steps "$steps" 1 1000000
[[ $delays =~ ^[0-9]+(\.[0-9]+)?,[0-9]+(\.[0-9]+)?$ ]] || arg_fail "--delays '$delays' is not D1,D2 in ms"
d1=${delays%,*} d2=${delays#*,}
opt_num --delays "$d1" 0 60000
opt_num --delays "$d2" 0 60000
awk "BEGIN {exit !($d2 > $d1)}" || arg_fail "--delays: D2 must be larger than D1"
real_model
out_dir "$out"
csv="$out/critical_path.csv.partial"
echo "planner,ranks,delay_ms,tpot_ms,calibrated_ms,model_delays,bytes_per_token" > "$csv"
for p in layerwise roundrobin random greedy tp somegather; do
    for d in "$d1" "$d2"; do
        say "$p on $ranks ranks, $d ms one way..."
        if ! "$root/jobs/testbed/testbed.sh" --ranks "$ranks" --cpu-pct "$cpu" --delay-ms "$d" --jitter-ms 0 -- \
             generate -m "$model" -n "$steps" --planner "$p" --json > "$out/run.json" 2> "$out/err"; then
            if grep -q "does not divide\|has only" "$out/err"; then say "$p skipped: $(grep error "$out/err")"; continue 2; fi
            fail "$p at $d ms: $(tail -1 "$out/err")"
        fi
        node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
          console.log([j.plan.planner, j.n_ranks, process.argv[2], j.tpot_ms, j.calibrated_token_ms,
                       j.critical_path_delays, j.plan.predicted_bytes_per_token].join(","))' "$out/run.json" "$d" >> "$csv"
    done
done
rm -f "$out/run.json" "$out/err"
mv "$csv" "$out/critical_path.csv"
node - "$out/critical_path.csv" "$d1" "$d2" "$cpu" > "$out/critical_path.md" <<'JS'
const [path, d1, d2, cpu] = process.argv.slice(2);
const rows = require("fs").readFileSync(path, "utf8").trim().split("\n").slice(1).map(l => l.split(","));
const by = {};
for (const [pl, n, d, tpot, cal, model, bytes] of rows) (by[pl] ??= {n, model: +model, bytes: +bytes})[d] = {tpot: +tpot, cal: +cal};
let o = `stories15M on ${Object.values(by)[0].n} emulated devices (${cpu}% of a core each), one-way link delay ${d1} and ${d2} ms\n\n`;
o += `| planner | delays (programs) | delays (measured) | TPOT at ${d1} ms | calibrated prediction | error |\n|---|---|---|---|---|---|\n`;
for (const [pl, r] of Object.entries(by)) {
  const measured = (r[d2].tpot - r[d1].tpot) / (d2 - d1);
  const err = 100 * (r[d1].cal / r[d1].tpot - 1);
  o += `| ${pl} | ${r.model} | ${measured.toFixed(2)} | ${r[d1].tpot.toFixed(1)} ms | ${r[d1].cal.toFixed(1)} ms | ${err >= 0 ? "+" : ""}${err.toFixed(0)}% |\n`;
}
process.stdout.write(o);
JS
cat "$out/critical_path.md"
say "wrote $out/critical_path.csv and critical_path.md"
