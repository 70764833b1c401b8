#!/usr/bin/env bash
# A Gantt chart of a `meshinfer ... --trace FILE` Chrome trace: one row per
# rank, one box per step (compute by block, communication, idle), over one
# forward pass of rank 0's (by default the last: a decoded token) or all of
# them, as a PNG drawn with gnuplot (node reads the JSON).
# usage: trace_gantt.sh TRACE.json OUT.png [--pass K | --all] [--title TEXT]
#   --pass K   rank 0's K-th forward pass (0: the first, the prompt's prefill;
#              negative counts from the end; default -1, the last)
#   --all      the whole trace
#   --title T  the chart's title (default: the trace's file name and the pass)
# Errors are one line on stderr with exit status 1.
set -euo pipefail
die() { echo "trace_gantt.sh: $*" >&2; exit 1; }
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"
    exit 0
fi
[[ $# -ge 2 ]] || die "usage: trace_gantt.sh TRACE.json OUT.png [--pass K | --all] [--title TEXT]"
trace=$1 png=$2; shift 2
pass=-1 all=0 title=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --pass) [[ $# -ge 2 && $2 =~ ^-?[0-9]+$ ]] || die "--pass needs an integer"; pass=$2; shift 2 ;;
        --all) all=1; shift ;;
        --title) [[ $# -ge 2 ]] || die "--title needs a text"; title=$2; shift 2 ;;
        *) die "unknown option '$1'" ;;
    esac
done
[[ -r $trace ]] || die "$trace: cannot read the trace"
# the output checked before any work: its folder exists and is writable, and it is not the trace
out_dir=$(dirname -- "$png")
[[ -d $out_dir && -w $out_dir ]] || die "$png: its folder does not exist or is not writable"
[[ ! -d $png ]] || die "$png is a directory"
[[ ! $png -ef $trace ]] || die "$png is the trace itself"
command -v node >/dev/null || die "needs node (Node.js)"
command -v gnuplot >/dev/null || die "needs gnuplot"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# boxes.dat: rank, start_ms, end_ms, colour (0xRRGGBB), one per step inside the window;
# meta: rank names, the window and the title, for gnuplot
node - "$trace" "$pass" "$all" "$title" "$tmp" <<'JS' || exit 1
const fs = require('fs');
const [trace, passArg, allArg, titleArg, out] = process.argv.slice(2);
const fail = m => { console.error('trace_gantt.sh: ' + m); process.exit(1); };
let t;
try { t = JSON.parse(fs.readFileSync(trace, 'utf8')); } catch (e) { fail(trace + ': not JSON (' + e.message + ')'); }
const ev = Array.isArray(t) ? t : t.traceEvents;
if (!Array.isArray(ev)) fail(trace + ': no traceEvents (not a Chrome trace)');
const names = {};
for (const e of ev) if (e.ph === 'M' && e.name === 'thread_name') names[e.tid] = e.args.name;
const steps = ev.filter(e => e.ph === 'X' && typeof e.ts === 'number' && typeof e.dur === 'number');
if (!steps.length) fail(trace + ': no steps in the trace');
const ranks = [...new Set(steps.map(e => e.tid))].sort((a, b) => a - b);
// the window: one forward pass of rank 0 (its envelope event) or everything
const fwd = steps.filter(e => e.tid === ranks[0] && e.name === 'forward').sort((a, b) => a.ts - b.ts);
let t0, t1, what;
if (allArg === '1' || !fwd.length) {
    t0 = Math.min(...steps.map(e => e.ts)); t1 = Math.max(...steps.map(e => e.ts + e.dur));
    what = 'whole run';
} else {
    let k = parseInt(passArg, 10);
    if (k < 0) k += fwd.length;
    if (k < 0 || k >= fwd.length) fail(`--pass ${passArg}: the trace has ${fwd.length} forward passes`);
    t0 = fwd[k].ts; t1 = fwd[k].ts + fwd[k].dur;
    what = `forward pass ${k} of ${fwd.length}` + (k === 0 ? ' (prefill)' : ' (a decoded token)');
}
// colours: attention and projection, FFN, other compute, communication, idle
const colour = n => /^(attention|projection)/.test(n) ? 0xe6862e : /^ffn/.test(n) ? 0x3c9a4a :
    /^(bcast|ibcast|put|post|allreduce|allgatherv|gatherv)/.test(n) ? 0xc0392b : n === 'idle' ? 0xd0d0d0 : 0x3b6fb6;
const rows = [];
for (const e of steps) {
    if (e.name === 'forward') continue;
    const a = Math.max(e.ts, t0), b = Math.min(e.ts + e.dur, t1);
    if (b <= a) continue;
    rows.push([ranks.indexOf(e.tid), ((a - t0) / 1000).toFixed(4), ((b - t0) / 1000).toFixed(4), colour(e.name)].join(' '));
}
fs.writeFileSync(out + '/boxes.dat', rows.join('\n') + '\n');
const label = ranks.map((r, i) => `"${(names[r] || 'rank ' + r).replace(/"/g, "'")}" ${i}`).join(', ');
const title = (titleArg || `${require('path').basename(trace)}: ${what}`).replace(/"/g, "'");
fs.writeFileSync(out + '/meta.gp', `set ytics (${label})\nset yrange [-0.6:${ranks.length - 0.4}]\n` +
    `set xrange [0:${((t1 - t0) / 1000).toFixed(4)}]\nset title "${title}"\n` +
    `set terminal pngcairo size 1400,${200 + 70 * ranks.length} font ",11"\n`);
JS

cat > "$tmp/plot.gp" <<'GP'
load ARG1 . "/meta.gp"
set output ARG2
set termoption noenhanced
set xlabel "milliseconds from the start of the window"
set grid xtics
set yrange [*:*] reverse
set key outside below horizontal
set style fill solid 1.0 noborder
plot ARG1 . "/boxes.dat" using (($2 + $3) / 2):1:(($3 - $2) / 2):(0.32):4 with boxxyerror lc rgb variable notitle, \
     NaN with boxes lc rgb "#e6862e" title "attention, projection", \
     NaN with boxes lc rgb "#3c9a4a" title "FFN", \
     NaN with boxes lc rgb "#3b6fb6" title "embed, norms, adds, logits", \
     NaN with boxes lc rgb "#c0392b" title "communication (sending, waiting for peers)", \
     NaN with boxes lc rgb "#d0d0d0" title "idle (between passes)"
GP
# gnuplot writes a temporary file, renamed once complete
if ! msg=$(gnuplot -c "$tmp/plot.gp" "$tmp" "$tmp/out.png" 2>&1); then
    die "gnuplot failed: $(head -1 <<<"$msg")"
fi
mv "$tmp/out.png" "$png" 2>/dev/null || die "$png: cannot write"
echo "wrote $png"
