#!/usr/bin/env bash
# Load on meshinfer serve: starts the server (NP ranks over shared memory, --max-batch B), sends N
# completion requests from C concurrent clients (jobs/lib/serve_load.js: prompts and max_tokens mixed,
# a share streamed, a share cancelled by the client midway, half greedy and half sampled; seeded),
# then stops it with SIGTERM. Prints one JSON object: the statuses, generated tokens, aggregate
# tokens/s, TTFT and TPOT percentiles of the streams, latency percentiles, every rank's resident
# memory before the load and after it, and the server's own /metrics figures; also written to
# results/serve_load-NAME.json.
#
# usage: jobs/experiments/serve_load.sh [--model FILE] [--np N] [--max-batch B] [--requests N]
#            [--concurrency C] [--stream-pct P] [--cancel-pct P] [--min-tokens N] [--max-tokens N]
#            [--seed S] [--name NAME]
#   defaults: stories15M, 1 rank, max batch 4, 64 requests, 8 clients, 50% streamed, 10% cancelled,
#   16 to 128 tokens, seed 1; NAME: the model's name, ranks and batch
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
model="" np=1 batch=4 requests=64 conc=8 stream=50 cancel=10 mintok=16 maxtok=128 seed=1 name=""
while (($#)); do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --model|--np|--max-batch|--requests|--concurrency|--stream-pct|--cancel-pct|--min-tokens|--max-tokens|\
        --seed|--name) need_value "$@" ;;&
        --model) model=$2; shift 2 ;;
        --np) np=$2; shift 2 ;;
        --max-batch) batch=$2; shift 2 ;;
        --requests) requests=$2; shift 2 ;;
        --concurrency) conc=$2; shift 2 ;;
        --stream-pct) stream=$2; shift 2 ;;
        --cancel-pct) cancel=$2; shift 2 ;;
        --min-tokens) mintok=$2; shift 2 ;;
        --max-tokens) maxtok=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --name) name=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
opt_int --np "$np" 1 64
opt_int --max-batch "$batch" 1 256
opt_int --requests "$requests" 1 100000
opt_int --concurrency "$conc" 1 1024
opt_pct --stream-pct "$stream"
opt_pct --cancel-pct "$cancel"
opt_int --min-tokens "$mintok" 1 4096
opt_int --max-tokens "$maxtok" "$mintok" 4096
opt_int --seed "$seed" 1 1000000000
[[ -z $model ]] || opt_file --model "$model"
[[ -z "$name" || "$name" =~ ^[A-Za-z0-9._][A-Za-z0-9._-]*$ ]] ||
    arg_fail "--name '$name' may hold letters, digits, '.', '_', '-' (not first)"
command -v node > /dev/null || fail "node is needed (the load's clients)"
command -v curl > /dev/null || fail "curl is needed"
meshinfer_bin
real_model
[[ -n "$name" ]] || name="$(basename "$model" .h5)-np$np-b$batch"
out_dir "$root/results"
. "$root/jobs/lib/serve_session.sh"
tmp=$(mktemp -d)
trap '[[ -n "$serve_launcher" ]] && kill -KILL "$serve_launcher" 2>/dev/null; rm -rf "$tmp"' EXIT
where=local
((np == 1)) || where=mpi
serve_start "$where" "$np" "$tmp/log" "$tmp/pid" "" -- -m "$model" --port 0 --max-batch "$batch" --max-queue "$requests" \
    --max-tokens "$maxtok" || fail "the server did not start: $(tail -2 "$tmp/log")"
url=$serve_url rank0=$serve_rank0 launcher=$serve_launcher
# every rank's pid: rank 0, then the other meshinfer processes below the launcher (mpirun's children)
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
pids=("$rank0")
for p in $(descendants "$launcher"); do
    [[ $p != "$rank0" && $(cat "/proc/$p/comm" 2> /dev/null) == meshinfer ]] && pids+=("$p")
done
((${#pids[@]} == np)) || fail "found ${#pids[@]} ranks' processes, not $np"
rss() { local p; for p in "${pids[@]}"; do awk '/^VmRSS/ {printf "%.1f ", $2 / 1024}' "/proc/$p/status"; done; }
# one request first: the KV cache and buffers touched once are not growth
curl -s -o /dev/null -m 60 --data-binary '{"prompt": "Once upon a time", "max_tokens": 8}' "$url/v1/completions"
before=$(rss)
say "$requests requests, $conc clients, on $np rank(s), max batch $batch ($url)"
node "$root/jobs/lib/serve_load.js" "$url" "$requests" "$conc" "$stream" "$cancel" "$mintok" "$maxtok" "$seed" \
    > "$tmp/load.json" || fail "the load's clients failed"
sleep 1 # the cancelled sequences stop at their next step
after=$(rss)
curl -s -m 10 "$url/metrics" > "$tmp/metrics"
rc=0
serve_stop || rc=$?
((rc == 0)) || fail "the server exited $rc after SIGTERM: $(tail -2 "$tmp/log")"
metric() { awk -v k="$1" '$1 == k {print $2}' "$tmp/metrics"; }
node -e '
const [load, before, after, np, batch, name, m499, gen, tps] = process.argv.slice(1);
const j = JSON.parse(load);
const mb = s => s.trim().split(/\s+/).map(Number);
Object.assign(j, {name, ranks: Number(np), max_batch: Number(batch), rss_mb_before: mb(before), rss_mb_after: mb(after),
  server: {requests_499: Number(m499 || 0), generated_tokens_total: Number(gen), tokens_per_s_last_10s: Number(tps)}});
console.log(JSON.stringify(j, null, 1));' "$(cat "$tmp/load.json")" "$before" "$after" "$np" "$batch" "$name" \
    "$(metric 'meshinfer_requests_total{status="499"}')" "$(metric meshinfer_generated_tokens_total)" \
    "$(metric meshinfer_tokens_per_second)" | tee "$root/results/serve_load-$name.json"
say "written: results/serve_load-$name.json"
