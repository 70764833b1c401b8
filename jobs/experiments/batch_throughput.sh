#!/usr/bin/env bash
# Aggregate decode throughput of serve's continuous batching, per planner: `meshinfer bench --batch B`
# runs B sequences one at a time (what one client at a time gets) and together (B concurrent clients:
# the engine `serve` runs, without HTTP), in alternating rounds, and checks that batching changes no
# token. On 1 rank over shared memory and on the emulated testbed (jobs/testbed/hosts.sh: every rank a
# host with its CPU quota and link delay; default hostfiles/hosts-5pi.json: 40% of a core, 5 ms links)
# at each --ranks count. Per-sequence TPOT is B / aggregate tokens/s of the decode. Writes
# results/batch_throughput/summary.md and .json, and prints the table.
#
# usage: jobs/experiments/batch_throughput.sh [--model FILE] [--cluster FILE] [--ranks LIST]
#            [--planners LIST] [--batches LIST] [--steps N] [--rounds N] [--no-local] [--no-testbed]
#   defaults: stories15M, hostfiles/hosts-5pi.json, ranks 3,5, planners layerwise,tp,greedy,hybrid,
#   batches 4,16, 48 positions per sequence (the longest prompt included), 3 rounds
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
model="" cluster="$root/hostfiles/hosts-5pi.json" ranks="3,5" planners="layerwise,tp,greedy,hybrid"
batches="4,16" steps=48 rounds=3 local=1 testbed=1
while (($#)); do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --model|--cluster|--ranks|--planners|--batches|--steps|--rounds) need_value "$@" ;;&
        --model) model=$2; shift 2 ;;
        --cluster) cluster=$2; shift 2 ;;
        --ranks) ranks=$2; shift 2 ;;
        --planners) planners=$2; shift 2 ;;
        --batches) batches=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --no-local) local=0; shift ;;
        --no-testbed) testbed=0; shift ;;
        *) bad_option "$1" ;;
    esac
done
opt_ints --ranks "$ranks" 2 64
opt_ints --batches "$batches" 1 64
opt_int --steps "$steps" 10 100000
opt_int --rounds "$rounds" 1 100
opt_file --cluster "$cluster"
[[ -z $model ]] || opt_file --model "$model"
[[ $planners =~ ^[a-z]+(,[a-z]+)*$ ]] || arg_fail "--planners '$planners' is not a comma list of planner names"
meshinfer_bin
real_model
out="$root/results/batch_throughput"
out_dir "$out"
IFS=, read -ra P <<< "$planners"; IFS=, read -ra R <<< "$ranks"; IFS=, read -ra B <<< "$batches"
rows="$out/rows.jsonl"; : > "$rows"

one() { # WHERE NP PLANNER BATCH: one bench --batch run, its JSON line appended to rows.jsonl
    local where=$1 np=$2 pl=$3 b=$4 j
    local args=(bench -m "$model" --batch "$b" --steps "$steps" --repeat "$rounds" --planner "$pl" --json)
    say "$where, $np rank(s), $pl, batch $b..."
    if [[ $where == local ]]; then
        j=$("$bin" "${args[@]}" 2> "$out/err") || fail "bench --batch failed: $(tail -1 "$out/err")"
    else
        j=$(MESHINFER_BIN="$bin" "$root/jobs/testbed/hosts.sh" --cluster "$cluster" --ranks "$np" --quiet \
            --timeout 900 -- "${args[@]}" --cluster "$cluster" 2> "$out/err" | tail -1) ||
            fail "testbed bench --batch failed: $(tail -1 "$out/err")"
    fi
    [[ $j == *'"identical": true'* ]] || fail "bench --batch gave no result: $(tail -1 "$out/err")"
    echo "{\"where\": \"$where\", \"planner\": \"$pl\", \"result\": $j}" >> "$rows"
}

if ((local)); then for b in "${B[@]}"; do one local 1 greedy "$b"; done; fi
if ((testbed)); then
    for np in "${R[@]}"; do for pl in "${P[@]}"; do for b in "${B[@]}"; do one testbed "$np" "$pl" "$b"; done; done; done
fi

node - "$rows" "$out" "$cluster" <<'JS'
const fs = require("fs");
const [rowsPath, out, cluster] = process.argv.slice(2);
const rows = fs.readFileSync(rowsPath, "utf8").trim().split("\n").map(l => JSON.parse(l));
let md = "| where | ranks | planner | micro-batches | batch | 1 at a time, tokens/s | batched, tokens/s | ratio (per-round range) | TPOT per sequence batched, ms | predicted ratio |\n";
md += "|---|---|---|---|---|---|---|---|---|---|\n";
for (const { where, planner, result: r } of rows) {
    const pred = r.predicted_batch_tokens_per_s / r.predicted_alone_tokens_per_s;
    md += `| ${where === "local" ? "shared memory" : "testbed"} | ${r.n_ranks} | ${planner} | ${r.micro_batches} | ${r.batch} | ` +
        `${r.alone_tokens_per_s.toFixed(1)} | ${r.batch_tokens_per_s.toFixed(1)} | **${r.ratio.toFixed(2)}x** ` +
        `(${r.ratio_min.toFixed(2)}-${r.ratio_max.toFixed(2)}) | ${(1000 * r.batch / r.batch_tokens_per_s).toFixed(1)} | ` +
        `${pred.toFixed(2)}x |\n`;
}
const head = `Model ${rows[0].result.model}; testbed ${cluster}; every sequence's tokens equal alone and batched (checked).\n\n`;
fs.writeFileSync(`${out}/summary.md`, head + md);
fs.writeFileSync(`${out}/summary.json`, JSON.stringify(rows, null, 1) + "\n");
process.stdout.write(head + md);
JS
