#!/usr/bin/env bash
# Aggregate decode throughput of serve's continuous batching, per planner, at 1 client and at B
# concurrent clients: `meshinfer bench --batch B` runs B sequences one at a time (what one client at a
# time gets) and together (B concurrent clients: the engine `serve` runs, without HTTP), in
# alternating rounds, and checks that batching changes no token. On 1 rank over shared memory and on
# the emulated testbed (jobs/testbed/hosts.sh: every rank a host with its CPU quota and link delay;
# default hostfiles/hosts-5pi.json: 40% of a core, 5 ms links) at each --ranks count. Per-request
# TPOT is B / aggregate tokens/s of the decode (every running sequence gets one token per pass).
# somegather runs only where the ranks divide the model's heads (elsewhere its row says so).
# Writes into results/batch_throughput/: rows.jsonl (every run), summary.csv and summary.md (one row
# per place and planner: tokens/s and TPOT at 1 client, the mean of its runs' one-at-a-time rounds,
# and at each batch, with that run's own batched/alone ratio), plot.csv and throughput.png (tokens/s
# against clients, a line per place and planner); prints the table.
#
# --http: the same over HTTP, `meshinfer serve` and real clients. One server per place and planner
# (--max-batch the largest of --batches; on the testbed rank 0 listens on its host's address, which
# this machine reaches over the testbed's bridge, its replies delayed like every packet the host
# sends), then in each round, for C = 1 and each of --batches (the order reversed every other
# round), C concurrent clients (jobs/lib/serve_load.js) each send --per-client streamed completions
# of --tokens tokens one after another (serve_load's prompts; half greedy, half sampled with a fixed
# seed), after one untimed request each (the clients' own first-request costs are not the server's). tokens/s counts every request's completion tokens over the wall time of the C clients
# (prefill, HTTP and the last requests' tail included); TPOT is each stream's (last - first event) /
# (tokens - 1), the median over requests (then over rounds); "x 1 client" is each round's ratio to
# that round's 1-client tokens/s (median and range). Into results/batch_throughput_http/.
#
# usage: jobs/experiments/batch_throughput.sh [--model FILE] [--cluster FILE] [--ranks LIST]
#            [--planners LIST] [--batches LIST] [--steps N] [--rounds N] [--lock FILE] [--append]
#            [--no-local] [--no-testbed] [--http [--tokens N] [--per-client N]]
#   defaults: stories15M, hostfiles/hosts-5pi.json, ranks 3,5, planners
#   layerwise,greedy,tp,somegather,hybrid,roundrobin, batches 4,16, 48 positions per sequence (the
#   longest prompt included), 3 rounds; --http: 24 tokens a request, 2 requests per client
#   --lock FILE  every run under `flock FILE`: a lock shared with the machine's other measurements
#                (--http: each server's whole session, start to stop)
#   --append     keep the earlier runs in rows.jsonl (a later run of the same place, planner and
#                batch replaces an earlier one in the tables): a long table measured in parts
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
model="" cluster="$root/hostfiles/hosts-5pi.json" ranks="3,5" planners="layerwise,greedy,tp,somegather,hybrid,roundrobin"
batches="4,16" steps="" rounds=3 local=1 testbed=1 lock="" append=0 http=0 tokens="" perclient=""
while (($#)); do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --model|--cluster|--ranks|--planners|--batches|--steps|--rounds|--lock|--tokens|--per-client) need_value "$@" ;;&
        --model) model=$2; shift 2 ;;
        --cluster) cluster=$2; shift 2 ;;
        --ranks) ranks=$2; shift 2 ;;
        --planners) planners=$2; shift 2 ;;
        --batches) batches=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --lock) lock=$2; shift 2 ;;
        --append) append=1; shift ;;
        --no-local) local=0; shift ;;
        --no-testbed) testbed=0; shift ;;
        --http) http=1; shift ;;
        --tokens) tokens=$2; shift 2 ;;
        --per-client) perclient=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
opt_ints --ranks "$ranks" 2 64
opt_ints --batches "$batches" 2 64
opt_int --rounds "$rounds" 1 100
opt_file --cluster "$cluster"
[[ -z $model ]] || opt_file --model "$model"
opt_planners --planners "$planners" layerwise roundrobin random greedy tp somegather hybrid exact auto
planners=${planners// /,}
if ((http)); then
    [[ -z $steps ]] || arg_fail "--steps is bench --batch's; with --http give --tokens (tokens a request)"
    tokens=${tokens:-24} perclient=${perclient:-2}
    opt_int --tokens "$tokens" 2 4096
    opt_int --per-client "$perclient" 1 1000
    command -v node > /dev/null || fail "--http needs node (the clients: jobs/lib/serve_load.js)"
    command -v curl > /dev/null || fail "--http needs curl"
else
    [[ -z $tokens ]] || arg_fail "--tokens applies to --http (bench --batch takes --steps)"
    [[ -z $perclient ]] || arg_fail "--per-client applies to --http"
    steps=${steps:-48}
    opt_int --steps "$steps" 10 100000
fi
((local || testbed)) || arg_fail "--no-local and --no-testbed leave nothing to measure"
opt_lock --lock "$lock"
meshinfer_bin
real_model
out="$root/results/batch_throughput$( ((http)) && echo _http)"
out_dir "$out"
IFS=, read -ra P <<< "$planners"; IFS=, read -ra R <<< "$ranks"; IFS=, read -ra B <<< "$batches"
rows="$out/rows.jsonl"
((append)) || : > "$rows"

locked() { if [[ -n $lock ]]; then flock "$lock" "$@"; else "$@"; fi; }

# meshinfer wants one device per rank: the first NP devices of the cluster file, into $out/cluster-NP.json
cluster_of() {
    local np=$1 c="$out/cluster-$1.json"
    node -e 'const fs = require("fs"), [f, n, o] = process.argv.slice(1), j = JSON.parse(fs.readFileSync(f, "utf8"));
        if (j.devices.length < n) { console.error(`${f} has ${j.devices.length} devices, not ${n}`); process.exit(1); }
        j.devices = j.devices.slice(0, Number(n)); fs.writeFileSync(o, JSON.stringify(j, null, 1) + "\n");' \
        "$cluster" "$np" "$c" || fail "--ranks $np: $(basename "$cluster") has fewer devices"
    echo "$c"
}

# somegather gives every rank an equal share of whole heads: its refusal is a row, not a failure
skip_row() { # WHERE NP PLANNER BATCH ERRFILE: 0 (and the row written) when the run was that refusal
    grep -q "does not divide the model's" "$5" 2> /dev/null || return 1
    say "skipped: $2 ranks do not divide the heads"
    echo "{\"where\": \"$1\", \"planner\": \"$3\", \"n_ranks\": $2, \"batch\": $4, \"skipped\": \"$2 ranks do not divide the heads\"}" >> "$rows"
}

one() { # WHERE NP PLANNER BATCH: one bench --batch run, its JSON line appended to rows.jsonl
    local where=$1 np=$2 pl=$3 b=$4 j rc=0
    local args=(bench -m "$model" --batch "$b" --steps "$steps" --repeat "$rounds" --planner "$pl" --json)
    say "$where, $np rank(s), $pl, batch $b..."
    if [[ $where == local ]]; then
        j=$(locked "$bin" "${args[@]}" 2> "$out/err") || rc=$?
    else
        local c
        c=$(cluster_of "$np")
        j=$(MESHINFER_BIN="$bin" locked "$root/jobs/testbed/hosts.sh" --cluster "$c" --quiet \
            --timeout 900 -- "${args[@]}" --cluster "$c" 2> "$out/err" | tail -1) || rc=$?
    fi
    if ((rc)) && [[ $pl == somegather ]] && skip_row "$where" "$np" "$pl" "$b" "$out/err"; then return 0; fi
    ((rc == 0)) || fail "bench --batch failed: $(tail -1 "$out/err")"
    [[ $j == *'"identical": true'* ]] || fail "bench --batch gave no result: $(tail -1 "$out/err")"
    echo "{\"where\": \"$where\", \"planner\": \"$pl\", \"n_ranks\": $np, \"batch\": $b, \"result\": $j}" >> "$rows"
}

if ((http)); then
    . "$root/jobs/lib/serve_session.sh"
    run_one() { serve_session "$@"; }
else
    run_one() { for b in "${B[@]}"; do one "$@" "$b"; done; }
fi
# on 1 rank every planner places the whole model on it: one row
if ((local)); then run_one local 1 greedy; fi
if ((testbed)); then
    for np in "${R[@]}"; do for pl in "${P[@]}"; do run_one testbed "$np" "$pl"; done; done
fi

node "$root/jobs/lib/batch_table.js" "$rows" "$out" "$cluster"
title="stories15M: aggregate decode tokens/s against concurrent clients (bench --batch; testbed: $(basename "$cluster"))"
((http)) && title="stories15M, meshinfer serve over HTTP ($tokens tokens a request): aggregate tokens/s (testbed: $(basename "$cluster"))"
plot_png "$out/throughput.png" 1100,620 << PLOT
set datafile separator ","
set title "$title"
set xlabel "concurrent clients$( ((http)) || echo " (sequences decoded together)")"
set ylabel "tokens/s, all clients together"
set logscale x 2
set logscale y 10
set xtics (1, 2, 4, 8, 16, 32, 64)
set xrange [0.85:$(( ${B[-1]} * 5 / 4 ))]
set grid
set key outside right
plot for [i=0:*] "$out/plot.csv" index i using 1:2 with linespoints lw 2 lc i + 1 pt i + 1 ps 1.3 title columnheader(1)
PLOT
say "written: ${out#"$root/"}/summary.md, summary.csv, throughput.png"
