#!/usr/bin/env bash
# Voltron's runtime scaling on the emulated testbed, two
# scenarios, each run once with --tpot-ms (the controller lowers precision
# when TPOT crosses the target and undoes it when the pressure has gone) and
# once without:
#   link:   tp on 3 ranks decodes 900 tokens of the stories42M shape
#           (synthetic weights: speed only) over one shared medium of 400
#           Mbit/s that drops to 40 Mbit/s 5 s into the run and recovers at
#           13 s; target 30 ms (communication scaling: the wire dtype).
#   link-mild: the same with the medium at 120 Mbit/s from 5 s to 13 s:
#           lowering the messages of some layers, the last first (no
#           importance file for synthetic weights), is enough.
#   device: layer-wise on 2 ranks (each holds half the layers) decodes 1000
#           tokens of the same model; rank 1 becomes 3x slower (a CPU at a
#           third of its speed: every compute op sleeps twice its own time,
#           MESHINFER_SLOWDOWN_FILE, as the testbed's --at T:rank=K,slowdown=S
#           does) 3 s into the run and recovers at 7 s; over shared memory, as
#           the testbed's packet emulator would take CPU from two ranks on two
#           cores; target 9 ms (computation scaling: the layers the slowed
#           device holds go to q8_0 / q4_0, from the last layer, as no
#           importance file exists for synthetic weights).
# Writes DIR/SCENARIO.csv (per token: ms with and without scaling, the
# dtypes in force), SCENARIO.md (TPOT before, during and after, the
# decisions with their cost) and SCENARIO.png for each.
#
# usage: jobs/experiments/scaling.sh [--out DIR] [--scenario link|link-mild|device|all]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
out="$root/results/scaling"
scenario=all
while (($#)); do
    case "$1" in
        --out) need_value "$@"; out=$2; shift 2 ;;
        --scenario) need_value "$@"; scenario=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
case "$scenario" in link|link-mild|device|all) ;; *) arg_fail "--scenario: '$scenario' is not link, link-mild, device or all" ;; esac
command -v gnuplot >/dev/null || fail "gnuplot is not installed (apt-get install gnuplot-nox)"
meshinfer_bin
# the job's own copy: a rebuild while it runs must not change the binary under it
tmpbin="$(mktemp /tmp/meshinfer-scaling.XXXXXX)"
trap 'rm -f "$tmpbin"' EXIT
cp "$bin" "$tmpbin"
chmod +x "$tmpbin"
export MESHINFER_BIN="$tmpbin"
model="$root/models/cache/stories42M-synth.h5"
[[ -f "$model" ]] || "$tmpbin" synth --shape stories42M --out "$model" >/dev/null
out_dir "$out"

run() { # label testbed-args... -- generate-args...
    local label=$1; shift
    local tb=()
    while [[ "$1" != "--" ]]; do tb+=("$1"); shift; done
    shift
    echo "scaling: $label..." >&2
    "$root/jobs/testbed/testbed.sh" "${tb[@]}" -- generate -m "$model" --ignore-eos --json "$@" \
        > "$out/$label.json.partial" 2> "$out/$label.err" ||
        fail "$label: $(grep -m1 error "$out/$label.err" || tail -1 "$out/$label.err")"
    mv "$out/$label.json.partial" "$out/$label.json"
}

# device_run LABEL GENERATE-ARGS...: 2 ranks over shared memory, rank 1 3x
# slower from 3 s to 7 s into the run
device_run() {
    local label=$1; shift
    local sf
    sf="$(mktemp /tmp/meshinfer-slowdown.XXXXXX)"
    echo 1 > "$sf"
    echo "scaling: $label..." >&2
    (sleep 3; echo 3 > "$sf"; sleep 4; echo 1 > "$sf") &
    local timer=$!
    local gen=(generate -m "$model" --ignore-eos --json "$@")
    mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
        -np 1 "$tmpbin" "${gen[@]}" : -np 1 env MESHINFER_SLOWDOWN_FILE="$sf" "$tmpbin" "${gen[@]}" \
        > "$out/$label.json.partial" 2> "$out/$label.err" || {
        kill "$timer" 2>/dev/null; rm -f "$sf"
        fail "$label: $(grep -m1 error "$out/$label.err" || tail -1 "$out/$label.err")"
    }
    kill "$timer" 2>/dev/null || true
    wait "$timer" 2>/dev/null || true
    rm -f "$sf"
    mv "$out/$label.json.partial" "$out/$label.json"
}

# report NAME TARGET_MS T1 T2 PHASE-NAMES...: CSV, Markdown and the plot of one scenario
report() {
    local name=$1 target=$2 t1=$3 t2=$4 before=$5 during=$6 after=$7
    node - "$out" "$name" "$target" "$t1" "$t2" "$before" "$during" "$after" <<'JS'
const fs = require("fs");
const [out, name, target, t1, t2, before, during, after] = process.argv.slice(2);
const s = JSON.parse(fs.readFileSync(`${out}/${name}-scaled.json`));
const f = JSON.parse(fs.readFileSync(`${out}/${name}-fixed.json`));
const ts = s.scaling.token_ms, tf = f.scaling.token_ms, dec = s.scaling.decisions;
// what is in force at each token: the wire dtype and the layers lowered
let wire = "fp32", layers = "", di = 0, csv = "token,scaled_ms,fixed_ms,wire,lowered\n";
const lowered = {};
for (let i = 0; i < Math.min(ts.length, tf.length); i++) {
  while (di < dec.length && dec[di].token <= i) {
    const d = dec[di++];
    // a wire decision for some layers only leaves the plan's dtype and names the layers
    wire = d.kind === "wire" && d.change ? `${d.wire_from} (${d.change.replace("messages of ", "")})` : d.wire_to;
    if (d.kind === "weights")
      for (const part of d.change.replace(/^layers /, "").split(", ")) {
        const [ls, dt] = part.split(" -> ");
        for (const l of ls.trim().split(" ")) lowered[l] = dt;
      }
    layers = Object.keys(lowered).filter(l => lowered[l] !== "fp32").map(l => `${l}:${lowered[l]}`).join(" ");
  }
  csv += `${i + 1},${ts[i]},${tf[i]},${wire},${layers}\n`;
}
fs.writeFileSync(`${out}/${name}.csv`, csv);
// the testbed's events are by time; find their tokens from the cumulative step times
// (start-up and the prompt come first: about 0.5 s plus TTFT)
const at = (t, T) => { let c = 0; for (let i = 0; i < t.length; i++) { c += t[i] / 1e3; if (c >= T) return i; } return t.length; };
const phases = (t, ttft) => { const a = at(t, t1 - ttft / 1e3 - 0.5), b = at(t, t2 - ttft / 1e3 - 0.5); return [[0, a], [a, b], [b, t.length]]; };
const med = (t, [a, b]) => { const x = t.slice(a, b).sort((p, q) => p - q); return x.length ? x[x.length >> 1] : 0; };
const mean = (t, [a, b]) => { const x = t.slice(a, b); return x.reduce((p, q) => p + q, 0) / Math.max(1, x.length); };
let md = `| run | TPOT before (${before}) | during (${during}) | after (${after}) | whole run |\n|---|---|---|---|---|\n`;
for (const [label, j] of [[`with --tpot-ms ${target}`, s], ["without scaling", f]]) {
  const t = j.scaling.token_ms, p = phases(t, j.ttft_ms);
  md += `| ${label} | ${mean(t, p[0]).toFixed(1)} ms (median ${med(t, p[0]).toFixed(1)}) | ` +
        `${mean(t, p[1]).toFixed(1)} ms (median ${med(t, p[1]).toFixed(1)}) | ` +
        `${mean(t, p[2]).toFixed(1)} ms (median ${med(t, p[2]).toFixed(1)}) | ${j.tpot_ms.toFixed(1)} ms |\n`;
}
md += "\n| after token | kind | trigger | change | decided in | poll | installed in |\n|---|---|---|---|---|---|---|\n";
for (const d of dec) {
  const change = d.kind === "wire" ? (d.change || `messages ${d.wire_from} -> ${d.wire_to}`) : d.change;
  md += `| ${d.token} | ${d.restore ? "restore " : ""}${d.kind} | ${d.trigger} | ${change} | ${d.decide_us.toFixed(0)} us | ` +
        `${d.poll_ms.toFixed(2)} ms | ${d.apply_ms.toFixed(1)} ms |\n`;
}
md += `\nThe phases are told apart by the run's own clock (the events at ${t1} s and ${t2} s; about 0.5 s of start-up and the prompt come first).\n`;
fs.writeFileSync(`${out}/${name}.md`, md);
JS
}

plot() { # name title target label
    plot_png "$out/$1.png" "1000,420" ",10" <<GP
set datafile separator ","
set title "$2 (clipped at 3x target)"
set xlabel "decoded token"
set ylabel "ms per token"
set grid
set key top left
# a few steps of 20-80 ms (this VM's scheduler) would flatten the rest: clipped
set yrange [0:$3 * 3]
plot "$out/$1.csv" every ::1 using 1:3 with lines lc rgb "#bbbbbb" title "without scaling", \
     "$out/$1.csv" every ::1 using 1:2 with lines lc rgb "#1f77b4" title "$4", \
     $3 with lines dt 2 lc rgb "#d62728" title "target"
GP
}

if [[ "$scenario" == link || "$scenario" == all ]]; then
    link_tb=(--ranks 3 --cpu-pct 100 --delay-ms 0 --jitter-ms 0 --rate-mbit 400 --at 5:link=0/40 --at 13:link=0/400)
    run link-scaled "${link_tb[@]}" -- --planner tp -n 900 --tpot-ms 30
    run link-fixed "${link_tb[@]}" -- --planner tp -n 900
    report link 30 5 13 "400 Mbit/s" "40 Mbit/s" "400 Mbit/s"
    plot link "Voltron communication scaling: tp, 3 ranks, stories42M shape; shared medium 400 -> 40 -> 400 Mbit/s" 30 \
        "--tpot-ms 30 (wire dtype lowered and restored)"
    cat "$out/link.md"
fi
if [[ "$scenario" == link-mild || "$scenario" == all ]]; then
    mild_tb=(--ranks 3 --cpu-pct 100 --delay-ms 0 --jitter-ms 0 --rate-mbit 400 --at 5:link=0/120 --at 13:link=0/400)
    run link-mild-scaled "${mild_tb[@]}" -- --planner tp -n 900 --tpot-ms 30
    run link-mild-fixed "${mild_tb[@]}" -- --planner tp -n 900
    report link-mild 30 5 13 "400 Mbit/s" "120 Mbit/s" "400 Mbit/s"
    plot link-mild "Voltron communication scaling per layer: tp, 3 ranks, stories42M shape; 400 -> 120 -> 400 Mbit/s" 30 \
        "--tpot-ms 30 (some layers' messages lowered and restored)"
    cat "$out/link-mild.md"
fi
if [[ "$scenario" == device || "$scenario" == all ]]; then
    device_run device-scaled --planner layerwise --controller-works yes -n 1000 --tpot-ms 9
    device_run device-fixed --planner layerwise --controller-works yes -n 1000
    report device 9 3 7 "full speed" "rank 1 3x slower" "full speed"
    plot device "Voltron computation scaling: layer-wise, 2 ranks, stories42M shape; rank 1 3x slower from 3 s to 7 s" 9 \
        "--tpot-ms 9 (its layers lowered and restored)"
    cat "$out/device.md"
fi
echo "scaling: wrote $out/{link,link-mild,device}.{csv,md,png} (those run)" >&2
