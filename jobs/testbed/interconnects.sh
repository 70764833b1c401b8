#!/usr/bin/env bash
# Interconnect swapping, measured: the same generation over Open
# MPI's shared memory on one host (btl vader), TCP on that host's loopback
# (btl tcp on lo), and TCP between separate hosts (jobs/testbed/hosts.sh: one network
# namespace per rank, veths on a bridge; no delay, loss, bandwidth limit or CPU
# quota, so only the path differs). Only MCA parameters and the hostfile change;
# the text must not. Prints TPOT and TTFT per path (median of --repeat runs)
# and the ratio to shared memory, and writes results/interconnects.csv.
# usage: jobs/testbed/interconnects.sh [--ranks N] [--tokens N] [--planner P] [--repeat N] [--model FILE]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
ranks=5 tokens=64 planner=greedy repeat=3 model=""
fail_status=2
while (($#)); do
    case "$1" in
        --ranks|--tokens|--planner|--repeat|--model) need_value "$@" ;;
    esac
    case "$1" in
        --ranks) ranks=$2; shift 2 ;;
        --tokens) tokens=$2; shift 2 ;;
        --planner) planner=$2; shift 2 ;;
        --repeat) repeat=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) bad_option "$1" ;;
    esac
done
opt_int --ranks "$ranks" 2 16
opt_int --tokens "$tokens" 1 9999
opt_int --repeat "$repeat" 1 9999
[[ $planner =~ ^(layerwise|roundrobin|random|greedy|tp|somegather|hybrid|auto)$ ]] ||
    arg_fail "--planner '$planner' is not one of layerwise roundrobin random greedy tp somegather hybrid auto"
[[ -z $model ]] || opt_file --model "$model"
[[ $(id -u) -eq 0 ]] || fail "needs root (the hosts path makes network namespaces)"
meshinfer_bin
real_model
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
{
    printf '{"description": "interconnects.sh: %d plain hosts, no emulation", "devices": [' "$ranks"
    for ((i = 0; i < ranks; i++)); do printf '%s{"name": "h%d", "mem_mb": 1000}' "$([[ $i == 0 ]] || echo ,)" "$i"; done
    printf ']}\n'
} > "$tmp/plain.json"
gen=(generate -m "$model" -n "$tokens" --ignore-eos --planner "$planner" --json)
local_mpi=(mpirun --allow-run-as-root -q --oversubscribe --bind-to none -np "$ranks" --mca mpi_yield_when_idle 1
           -x OPENBLAS_NUM_THREADS=1)
run() { # PATH_NAME K
    case $1 in
        vader) "${local_mpi[@]}" --mca btl self,vader "$bin" "${gen[@]}" ;;
        tcp-lo) "${local_mpi[@]}" --mca btl self,tcp --mca btl_tcp_if_include lo --mca osc pt2pt "$bin" "${gen[@]}" ;;
        hosts) "$root/jobs/testbed/hosts.sh" --quiet --cluster "$tmp/plain.json" --timeout 600 -- "${gen[@]}" ;;
    esac > "$tmp/$1.$2.json" 2> "$tmp/$1.$2.err" || { tail -3 "$tmp/$1.$2.err" >&2; fail "the $1 run failed"; }
}
paths=(vader tcp-lo hosts)
for ((k = 0; k < repeat; k++)); do
    for p in "${paths[@]}"; do
        echo "interconnects: $(date +%T) run $((k + 1))/$repeat over $p" >&2
        run "$p" "$k"
    done
done
mkdir -p "$root/results"
node - "$tmp" "$repeat" "$root/results/interconnects.csv" "${paths[@]}" <<'JS'
const fs = require('fs');
const [dir, repeat, csvPath, ...paths] = process.argv.slice(2);
const med = a => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };
const res = paths.map(p => {
    const js = [...Array(+repeat).keys()].map(k => JSON.parse(fs.readFileSync(`${dir}/${p}.${k}.json`)));
    return {p, tpot: med(js.map(j => j.tpot_ms)), ttft: med(js.map(j => j.ttft_ms)),
            rtt: med(js.map(j => j.rtt_ms.slice(1).reduce((a, b) => a + b, 0) / (j.rtt_ms.length - 1))),
            text: js[0].text, texts: new Set(js.map(j => j.text)).size, ranks: js[0].n_ranks};
});
const base = res[0];
const same = res.every(r => r.text === base.text && r.texts === 1);
let out = `| path | TPOT ms | TTFT ms | RTT to rank 0, ms | TPOT vs shared memory |\n|---|---|---|---|---|\n`;
for (const r of res)
    out += `| ${r.p} | ${r.tpot.toFixed(2)} | ${r.ttft.toFixed(1)} | ${r.rtt.toFixed(3)} | ${(r.tpot / base.tpot).toFixed(2)}x |\n`;
process.stdout.write(out + `\n${res[0].ranks} ranks, median of ${repeat}; same text on every path and run: ${same ? 'yes' : 'NO'}\n`);
fs.writeFileSync(csvPath + '.partial', 'path,tpot_ms,ttft_ms,rtt_ms,tpot_vs_vader\n' +
    res.map(r => [r.p, r.tpot, r.ttft, r.rtt, r.tpot / base.tpot].join(',')).join('\n') + '\n');
fs.renameSync(csvPath + '.partial', csvPath);
process.exit(same ? 0 : 1);
JS
