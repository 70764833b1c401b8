#!/usr/bin/env bash
# `meshinfer simulate` against the emulated testbed (jobs/testbed/testbed.sh:
# stories15M, every rank in its own CPU-quota cgroup, mi_netem's link delay,
# no jitter). For every rank count R and one-way delay D, `meshinfer
# calibrate` on the testbed writes the cluster file (names, budgets, each
# device's compute regression, every link by ping-pong) and `meshinfer plan`
# makes each planner's placement from it. Every planner then generates on
# the testbed with that cluster file (its placement checked to be the plan
# file's), and `meshinfer simulate` runs the same placement, prompt length
# and tokens on the devices and links the run measured: each rank's
# weight-streaming rate on its own shard (`stream_gbs`) and half the round
# trips (`rtt_ms`), as the run's calibrated prediction takes them. Measured
# against simulated TPOT, beside three other feeds: every link at the
# emulator's delay; calibrate's file; and each device's speed set to the
# compute its rank measured decoding (to tell the simulator's messages from
# the device model). A device's CPU quota is its rank's cgroup's as the run
# reports it (cpu_quota, cpu_period_ms; its speed is then the streaming rate
# on the CPU clock, stream_cpu_gbs: the unthrottled speed), its messages' and waits' CPU
# (msg_us, spin_us, poll_pct) and the communicators' and windows' set-up
# (comm_setup_ms, win_setup_ms) calibrate's. A planner refused on R ranks
# (somegather: R must divide the 6 KV heads) is a row with the planner's
# reason.
# Last, a generation that outgrows its memory budgets (greedy, --replan, the
# first placement made for --kv-positions, --replan-cluster's budgets,
# calibrated on the testbed) runs on the testbed and in the simulator: the
# tokens where each re-placed, and how many KV heads moved.
# With --repeat N every planner, rank count and delay runs N times: a
# device's speed on this VM varies from one run of the same command to the
# next (hybrid putting the model on one rank: 8.1 to 12.9 ms TPOT over 13
# runs), so one run's error is partly that run's draw. The row then compares
# the median measured TPOT with the median of the runs' simulations, and
# gives the range of the runs' own errors.
# Writes DIR/sim_validate.csv (one row per planner, ranks and delay),
# DIR/replan.csv (both runs' re-placements) and DIR/sim_validate.md, and
# prints the tables. An interrupted run resumes: the calibrations and
# testbed runs kept in DIR/runs are not run again.
#
# usage: jobs/experiments/sim_validate.sh [options]
#   --ranks "3 5"         rank counts
#   --delays "2 8"        one-way link delays, ms
#   --cpu-pct P           CPU quota per rank, % of one core (default 40: the Pi emulation)
#   --planners LIST       default "layerwise roundrobin random greedy tp somegather hybrid"
#   --tokens N            tokens generated per run (default 48)
#   --repeat N            runs of each planner, rank count and delay (default 1)
#   --replan-cluster FILE the re-placement run's devices: names and memory budgets, one
#                         device per rank (default mpi_tests/cluster-tight.json: 4 ranks
#                         whose budgets hold stories15M's KV cache for the whole context
#                         only once heads have moved)
#   --replan-delay D      its one-way delay, ms (default 2)
#   --replan-tokens N     its tokens (default 200)
#   --kv-positions N      its first placement's positions (default 32)
#   --no-replan           no re-placement run
#   --lock FILE           every testbed run under `flock FILE` (the machine's shared
#                         measurement lock, e.g. /tmp/measure.lock; default none)
#   --out DIR             output folder (default results/sim_validate); its runs are kept and
#                         reused, so an invocation with other settings than theirs is refused
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
model="" out="$root/results/sim_validate" lock=""
ranks="3 5" delays="2 8" cpu=40 tokens=48 repeat=1 planners="layerwise roundrobin random greedy tp somegather hybrid"
rp_cluster="$root/mpi_tests/cluster-tight.json" rp=1 rp_delay=2 rp_tokens=200 kvpos=32
while (($#)); do
    case "$1" in
        --ranks|--delays|--cpu-pct|--planners|--tokens|--repeat|--replan-cluster|--replan-delay|--replan-tokens|--kv-positions|--lock|--out)
            need_value "$@" ;;&
        --ranks) ranks=$2; shift 2 ;;
        --delays) delays=$2; shift 2 ;;
        --cpu-pct) cpu=$2; shift 2 ;;
        --planners) planners=$2; shift 2 ;;
        --tokens) tokens=$2; shift 2 ;;
        --repeat) repeat=$2; shift 2 ;;
        --replan-cluster) rp_cluster=$2; shift 2 ;;
        --no-replan) rp=0; shift ;;
        --replan-delay) rp_delay=$2; shift 2 ;;
        --replan-tokens) rp_tokens=$2; shift 2 ;;
        --kv-positions) kvpos=$2; shift 2 ;;
        --lock) lock=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
opt_ints --ranks "$ranks" 2 9
opt_nums --delays "$delays" 0 1000
opt_pct --cpu-pct "$cpu" 1
opt_planners --planners "$planners" layerwise roundrobin random greedy tp somegather hybrid
[[ -n ${planners//[ ,]/} ]] || arg_fail "--planners is an empty list"
opt_int --tokens "$tokens" 2 200
opt_int --repeat "$repeat" 1 20
opt_file --replan-cluster "$rp_cluster"
opt_num --replan-delay "$rp_delay" 0 1000
opt_int --replan-tokens "$rp_tokens" 2 240
opt_int --kv-positions "$kvpos" 1 256
opt_lock --lock "$lock"
((EUID == 0)) || fail "the testbed needs root (network namespaces, cgroups, NFQUEUE)"
meshinfer_bin
real_model
out_dir "$out" "$out/runs"
# runs are kept and reused by name (planner, ranks, delay): they must have been made with these
# settings, so a later invocation with others is refused rather than mixed with them
settings="cpu-pct $cpu tokens $tokens replan-tokens $rp_tokens kv-positions $kvpos replan-cluster $(sha256sum < "$rp_cluster" | cut -c1-16)"
if [[ -s $out/runs/settings ]]; then
    [[ "$(cat "$out/runs/settings")" == "$settings" ]] ||
        fail "$out/runs holds runs made with other settings ($(cat "$out/runs/settings")); use another --out or remove it"
else
    echo "$settings" > "$out/runs/settings"
fi
out=$(cd "$out" && pwd) # (the testbed's ranks write the calibration)
locked() { if [[ -n $lock ]]; then flock "$lock" "$@"; else "$@"; fi; }
testbed() { locked "$root/jobs/testbed/testbed.sh" --ranks "$1" --cpu-pct "$cpu" --delay-ms "$2" --jitter-ms 0 -- "${@:3}"; }

# The cluster file of R ranks at D ms, measured on the testbed (named NAME,
# budgets and names from the cluster file BASE when given).
calibrated() {
    local f="$out/runs/cluster-${3:-r$1-d$2}.json"
    if [[ ! -s $f ]]; then
        say "calibrating $1 ranks at $2 ms..."
        testbed "$1" "$2" calibrate -m "$model" ${4:+--cluster "$4"} -o "$f.partial" > /dev/null 2> "$out/err" ||
            fail "calibrate on $1 ranks at $2 ms: $(tail -1 "$out/err")"
        mv "$f.partial" "$f"
    fi
    echo "$f"
}

# The cluster a run measured (node; args: the run's --json, the calibrated
# cluster file, the one-way latency to give every link, or "rtt"): each
# device's speed is the weight-streaming rate its rank measured on its own
# shard at start-up (stream_gbs, GB/s, with mem_bandwidth_gbs 1), each link
# half the round trip the ranks measured (rank 0 to r: rtt_ms[r] / 2; r to
# s: the mean of theirs, as the calibrated prediction takes them) or the
# given latency (a rank that holds no weights measured nothing: rank 0's
# rate); the run's CPU quotas; names, budgets, link bandwidths, messages' and
# waits' CPU and the set-up costs from calibrate's file.
measured_cluster() {
    node - "$@" <<'JS'
const fs = require("fs");
const [run, cal, lat] = process.argv.slice(2);
const m = JSON.parse(fs.readFileSync(run)), c = JSON.parse(fs.readFileSync(cal));
const n = m.n_ranks, half = (a, b) => a === b ? 0 : lat !== "rtt" ? +lat :
  a === 0 ? m.rtt_ms[b] / 2 : b === 0 ? m.rtt_ms[a] / 2 : (m.rtt_ms[a] + m.rtt_ms[b]) / 4;
const ix = [...Array(n).keys()];
const cpu = r => {
  const d = c.devices[r], o = {}, q = (m.cpu_quota ?? [])[r];
  if (q > 0 && q <= 1) { o.cpu_quota = q; o.cpu_period_ms = m.cpu_period_ms[r]; }
  for (const k of ["msg_us", "spin_us", "poll_pct"]) if (d[k] !== undefined) o[k] = d[k];
  return o;
};
// under a quota, the unthrottled rate (stream_cpu_gbs; runs of the first sweep of the quota model had
// their stream_gbs on the CPU clock already, without that key)
const q = r => ((m.cpu_quota ?? [])[r] > 0 && m.stream_cpu_gbs) ? m.stream_cpu_gbs : m.stream_gbs;
const rate = r => q(r)[r] > 0 ? q(r)[r] : q(0)[0];
const setup = {};
for (const k of ["comm_setup_ms", "win_setup_ms"]) if (c[k] !== undefined) setup[k] = c[k];
console.log(JSON.stringify({
  description: `measured by a ${m.plan.planner} run on ${n} ranks: stream_gbs and ${lat === "rtt" ? "rtt_ms / 2" : "latency " + lat + " ms"}`,
  link: c.link, mem_bandwidth_gbs: 1, gflops: c.gflops ?? 10, ...setup,
  links: {latency_ms: ix.map(a => ix.map(b => half(a, b))), bandwidth_mbit: c.links.bandwidth_mbit},
  devices: ix.map(r => ({name: c.devices[r].name, mem_mb: c.devices[r].mem_mb, speed: rate(r), ...cpu(r)}))}, null, 1));
JS
}

# The measured cluster with each device's speed scaled so that the simulated
# compute of the run equals what the rank measured decoding (the runtime's
# attention, projection, FFN and logits seconds; simulated busy time is
# inversely proportional to a roofline device's speed): the event walk on
# the compute the run really had, to tell the simulator's messages from the
# device model (args: the run's --json, the measured cluster, its simulation).
# The measured compute is wall time, throttling included: no quota, messages'
# or waits' CPU here.
decode_cluster() {
    node - "$@" <<'JS'
const fs = require("fs");
const [run, cf, sf] = process.argv.slice(2);
const m = JSON.parse(fs.readFileSync(run)), c = JSON.parse(fs.readFileSync(cf)), s = JSON.parse(fs.readFileSync(sf));
c.description = "the run's measured cluster, each speed scaled to the compute its rank measured";
c.devices.forEach((d, r) => {
  const t = m.ranks[r].seconds, meas = t.attention + t.projection + t.ffn + t.logits, sim = s.per_device[r].busy_s;
  if (meas > 0 && sim > 0) d.speed *= sim / meas;
  for (const k of ["cpu_quota", "cpu_period_ms", "msg_us", "spin_us", "poll_pct"]) delete d[k];
});
console.log(JSON.stringify(c, null, 1));
JS
}

# The placement a run made is the plan file's (layer by layer), else the comparison would not hold.
same_placement() {
    node - "$1" "$2" <<'JS'
const fs = require("fs");
const m = JSON.parse(fs.readFileSync(process.argv[2])), p = JSON.parse(fs.readFileSync(process.argv[3]));
const key = l => JSON.stringify([l.kv_rank, l.proj_rank, l.ffn]);
const a = m.plan.placement.layers.map(key), b = p.layers.map(key);
process.exit(a.length === b.length && a.every((x, i) => x === b[i]) ? 0 : 1);
JS
}

# One run of planner p on R ranks at D ms (the loop's variables) into B.json (kept: an interrupted
# sweep does not run it again), and its simulations on the four feeds and four more seeds into
# B.sim-*.json (args: B, the run's number).
one_run() {
    local b=$1 k=$2 run="$1.json" np f c s
    if [[ ! -s $run ]]; then
        say "$p on $R ranks, $D ms one way$( ((repeat == 1)) || echo ", run $k of $repeat")..."
        testbed "$R" "$D" generate -m "$model" -n "$tokens" --planner "$p" --cluster "$cl" --ignore-eos \
            --json > "$run.partial" 2> "$out/err" || fail "$p on $R ranks at $D ms: $(tail -1 "$out/err")"
        mv "$run.partial" "$run"
    fi
    same_placement "$run" "$plan" || fail "$p on $R ranks at $D ms: the run placed otherwise than $plan"
    np=$(json "$run" j.prompt_tokens)
    measured_cluster "$run" "$cl" rtt > "$b.cluster.json"
    measured_cluster "$run" "$cl" "$D" > "$b.cluster-delay.json"
    for c in cluster cluster-delay calibrate cluster-decode; do
        f="$b.$c.json"
        [[ $c != calibrate ]] || f=$cl
        [[ $c != cluster-decode ]] || decode_cluster "$run" "$b.cluster.json" "$b.sim-cluster.json" > "$f"
        "$bin" simulate -m "$model" --cluster "$f" --plan-file "$plan" --prompt-tokens "$np" -n "$tokens" --json \
            > "$b.sim-$c.json" 2> "$out/err" || fail "simulate $p on $R ranks at $D ms: $(tail -1 "$out/err")"
    done
    # the quota periods' phases are not measured (each device's drawn from the seed): the same
    # simulation with seeds 2-5 gives the spread they make
    for s in 2 3 4 5; do
        "$bin" simulate -m "$model" --cluster "$b.cluster.json" --plan-file "$plan" --prompt-tokens "$np" \
            -n "$tokens" --seed $s --json > "$b.sim-cluster-s$s.json" 2> "$out/err" ||
            fail "simulate $p on $R ranks at $D ms, seed $s: $(tail -1 "$out/err")"
    done
}

csv="$out/sim_validate.csv"
echo "planner,ranks,delay_ms,measured_tpot_ms,simulated_tpot_ms,error_pct,sim_delay_latency_ms,sim_calibrate_file_ms,sim_decode_compute_ms,calibrated_token_ms,rtt_ms,sim_phases_min_ms,sim_phases_max_ms,note,runs,measured_min_ms,measured_max_ms,run_error_min_pct,run_error_max_pct" > "$csv.partial"
for R in ${ranks//,/ }; do
    for D in ${delays//,/ }; do
        cl=$(calibrated "$R" "$D")
        for p in ${planners//,/ }; do
            base="$out/runs/$p-r$R-d$D"
            refused="$base.refused" plan="$base.plan.json"
            # the placement, as the run will make it from the same cluster file; one the planner
            # refuses here (somegather's heads) is refused before the testbed
            if [[ ! -s $refused ]] &&
               ! "$bin" plan -m "$model" --cluster "$cl" --planner "$p" --out "$plan" > /dev/null 2> "$out/err"; then
                sed -n 's/^meshinfer: error: //p' "$out/err" | head -1 > "$refused"
                [[ -s $refused ]] || fail "plan $p on $R ranks at $D ms: $(tail -1 "$out/err")"
            fi
            if [[ -s $refused ]]; then
                echo "$p,$R,$D,,,,,,,,,,,\"refused: $(tr -d '",' < "$refused")\",,,,," >> "$csv.partial"
                continue
            fi
            # run k's files: BASE.json and BASE.sim-*.json for the first, BASE.kK.* for the others
            for ((k = 1; k <= repeat; k++)); do
                b=$base
                ((k == 1)) || b="$base.k$k"
                one_run "$b" "$k"
            done
            node - "$base" "$p" "$R" "$D" "$repeat" >> "$csv.partial" <<'JS'
const fs = require("fs");
const [base, p, R, D, n] = process.argv.slice(2);
const med = a => { const v = [...a].sort((x, y) => x - y), h = v.length >> 1; return v.length % 2 ? v[h] : (v[h - 1] + v[h]) / 2; };
const runs = [...Array(+n).keys()].map(i => {
  const b = i ? `${base}.k${i + 1}` : base, sim = c => JSON.parse(fs.readFileSync(`${b}.sim-${c}.json`)).tpot_ms;
  return {m: JSON.parse(fs.readFileSync(`${b}.json`)), sim};
});
const mt = med(runs.map(r => r.m.tpot_ms)), col = c => med(runs.map(r => r.sim(c)));
const s = col("cluster"), err = 100 * (s / mt - 1);
const ph = runs.flatMap(r => [r.sim("cluster"), ...[2, 3, 4, 5].map(k => r.sim(`cluster-s${k}`))]);
const errs = runs.map(r => 100 * (r.sim("cluster") / r.m.tpot_ms - 1)), tp = runs.map(r => r.m.tpot_ms);
const m = runs[0].m;
console.log([p, R, D, mt.toFixed(2), s.toFixed(2), err.toFixed(1), col("cluster-delay").toFixed(2),
             col("calibrate").toFixed(2), col("cluster-decode").toFixed(2), m.calibrated_token_ms.toFixed(2),
             m.rtt_ms.slice(1).map(x => x.toFixed(2)).join(" "), Math.min(...ph).toFixed(2), Math.max(...ph).toFixed(2),
             "", n, Math.min(...tp).toFixed(2), Math.max(...tp).toFixed(2), Math.min(...errs).toFixed(1),
             Math.max(...errs).toFixed(1)].join(","));
JS
        done
    done
done
mv "$csv.partial" "$csv"

# Re-placement: greedy from a placement for --kv-positions, on budgets the cache outgrows.
rcsv="$out/replan.csv"
((rp)) || rm -f "$rcsv"
if ((rp)); then
    n=$(json "$rp_cluster" j.devices.length)
    ((n >= 2 && n <= 9)) || fail "--replan-cluster: $n devices; the testbed runs 2 to 9 ranks"
    cl=$(calibrated "$n" "$rp_delay" "replan-d$rp_delay" "$rp_cluster")
    run="$out/runs/replan-d$rp_delay.json"
    if [[ ! -s $run ]]; then
        say "greedy with re-placement on $n ranks, $rp_delay ms one way..."
        testbed "$n" "$rp_delay" generate -m "$model" -n "$rp_tokens" --planner greedy --cluster "$cl" --replan \
            --kv-positions "$kvpos" --ignore-eos --json > "$run.partial" 2> "$out/err" ||
            fail "greedy with re-placement: $(tail -1 "$out/err")"
        mv "$run.partial" "$run"
    fi
    np=$(json "$run" j.prompt_tokens)
    sim="$out/runs/replan-d$rp_delay.sim.json"
    "$bin" simulate -m "$model" --cluster "$cl" --planner greedy --replan --kv-positions "$kvpos" --prompt-tokens "$np" \
        -n "$rp_tokens" --json > "$sim" 2> "$out/err" || fail "simulate with re-placement: $(tail -1 "$out/err")"
    node - "$run" "$sim" "$n" "$rp_delay" > "$rcsv" <<'JS'
const fs = require("fs");
const [run, sim, n, D] = process.argv.slice(2);
const m = JSON.parse(fs.readFileSync(run)), s = JSON.parse(fs.readFileSync(sim));
console.log("source,ranks,delay_ms,token,position,moved,kv_heads_moved,move_ms,tpot_ms");
for (const e of m.replans)
  console.log(["testbed", n, D, e.position - m.prompt_tokens, e.position, e.moved ? 1 : 0, e.kv_heads_moved,
               e.move_ms.toFixed(2), m.tpot_ms.toFixed(2)].join(","));
for (const e of s.replans)
  console.log(["simulate", n, D, e.token, e.position, e.moved ? 1 : 0, e.kv_heads_moved, e.move_ms.toFixed(2),
               s.tpot_ms.toFixed(2)].join(","));
JS
fi
rm -f "$out/err"

node - "$csv" "$rcsv" "$cpu" "$tokens" "$kvpos" > "$out/sim_validate.md" <<'JS'
const fs = require("fs");
const [csv, rcsv, cpu, tokens, kvpos] = process.argv.slice(2);
const rows = fs.readFileSync(csv, "utf8").trim().split("\n").slice(1).map(l => l.match(/("[^"]*"|[^,]*)(,|$)/g).map(c => c.replace(/,$/, "").replace(/^"|"$/g, "")));
let o = `stories15M, ${tokens} tokens, ${cpu}% of a core per rank, no jitter. With several runs of a row, its measured TPOT is their median and its simulated TPOT the median of their simulations. Simulated: the run's placement on the devices and links the run measured (each rank's weight-streaming rate, half the round trips); also with every link at the emulator's delay, on meshinfer calibrate's file, and with each device's speed set to the compute its rank measured decoding\n\n`;
o += "| planner | ranks | one-way delay | measured TPOT | simulated TPOT | error | within 15% | runs: measured, their own errors | periods' phases (5 draws) | links at the delay | calibrate's file | compute as decoded |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
const pct = (a, b) => { const e = 100 * (a / b - 1); return `${e >= 0 ? "+" : ""}${e.toFixed(0)}%`; };
const sg = x => `${+x >= 0 ? "+" : ""}${(+x).toFixed(1)}%`;
for (const [p, R, D, m, s, e, sd, sc, sx, , , lo, hi, note, n, mlo, mhi, elo, ehi] of rows)
  o += note ? `| ${p} | ${R} | ${D} ms | ${note} | | | | | | | | |\n`
            : `| ${p} | ${R} | ${D} ms | ${(+m).toFixed(1)} ms${+n > 1 ? " (median)" : ""} | ${(+s).toFixed(1)} ms | ${sg(e)} | ${Math.abs(+e) <= 15 ? "yes" : "**no**"} | ${+n > 1 ? `${n}: ${(+mlo).toFixed(1)}-${(+mhi).toFixed(1)} ms, ${sg(elo)} to ${sg(ehi)}` : "1"} | ${pct(+lo, +m)} to ${pct(+hi, +m)} | ${(+sd).toFixed(1)} ms (${pct(+sd, +m)}) | ${(+sc).toFixed(1)} ms (${pct(+sc, +m)}) | ${(+sx).toFixed(1)} ms (${pct(+sx, +m)}) |\n`;
if (fs.existsSync(rcsv)) {
  const r = fs.readFileSync(rcsv, "utf8").trim().split("\n").slice(1).map(l => l.split(","));
  const by = src => r.filter(x => x[0] === src);
  const t = by("testbed"), s = by("simulate");
  const fmt = a => a.map(x => `${x[3]}${+x[5] ? ` (${x[6]} heads)` : " (same)"}`).join(", ") || "none";
  const within = t.length === s.length && t.every((x, i) => Math.abs(x[3] - s[i][3]) <= 1);
  const [n, D] = (t[0] ?? s[0] ?? [, "?", "?"]).slice(1, 3);
  o += `\nRe-placement: greedy, ${n} ranks, ${D} ms, first placement for ${kvpos} positions (token: re-placed before its pass; moved KV heads)\n\n`;
  o += "| | re-placements | at tokens | TPOT |\n|---|---|---|---|\n";
  o += `| testbed | ${t.length} | ${fmt(t)} | ${t[0]?.[8] ?? ""} ms |\n| simulate | ${s.length} | ${fmt(s)} | ${s[0]?.[8] ?? ""} ms |\n`;
  o += `\nSame number, each within one token: ${within ? "yes" : "**no**"}\n`;
}
process.stdout.write(o);
JS
cat "$out/sim_validate.md"
((rp)) && wrote="$csv, $rcsv" || wrote=$csv
say "wrote $wrote and $out/sim_validate.md"
