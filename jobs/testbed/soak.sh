#!/usr/bin/env bash
# Soak: many consecutive generations in one job on the
# emulated testbed (jobs/testbed/testbed.sh: a CPU quota per rank, link delay and
# packet loss, TCP retransmitting), on a cluster whose budgets force memory
# re-placements as the context grows; `generate --repeat` empties the KV cache,
# goes back to the first placement (itself a re-placement) and re-seeds the
# sampler between generations, so every generation re-places as the first
# did. Checks that every generation gives the first one's tokens, that every
# one moved shards, and that no rank's resident memory grows by a megabyte
# from the first repeat to the last; writes DIR/soak.json (the run's JSON)
# and prints the result.
#
# usage: jobs/testbed/soak.sh [--generations N] [--steps N] [--loss-pct L] [--port P] [--out DIR]
#   --port P   first TCP port of the testbed's links (default 46000; another
#              testbed running at the same time needs another range)
#   defaults: 200 generations of 64 tokens, 3% loss, 4 ranks, 1 ms links; needs root (testbed)
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
gens=200 steps=64 loss=3 port=46000 out="$root/results/soak"
while (($#)); do
    case "$1" in
        --generations|--steps|--loss-pct|--port|--out) need_value "$@" ;;&
        --generations) gens=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --loss-pct) loss=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
opt_int --generations "$gens" 1 1000000 # (generate --repeat's limit)
opt_int --steps "$steps" 1 1000000
opt_pct --loss-pct "$loss"
opt_port --port "$port" 99 # (the testbed's links take 100 ports)
model=""
real_model
out_dir "$out"
echo "soak: $gens generations of $steps tokens on the testbed (4 ranks, 1 ms links, $loss% loss)..." >&2
"$root/jobs/testbed/testbed.sh" --ranks 4 --cpu-pct 100 --delay-ms 1 --jitter-ms 0 --loss-pct "$loss" --port "$port" -- \
    generate -m "$model" -n "$steps" --ignore-eos --repeat "$gens" --cluster "$root/mpi_tests/cluster-tight.json" \
    --kv-positions 32 --replan --json > "$out/soak.json.partial" 2> "$out/soak.err" ||
    { rm -f "$out/soak.json.partial"; fail "the run failed: $(grep -m1 error "$out/soak.err" || tail -1 "$out/soak.err")"; }
mv "$out/soak.json.partial" "$out/soak.json"
node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1])), r = j.repeat;
  const g = r.rss_mb_after_last.map((x, i) => x - r.rss_mb_after_first_repeat[i]);
  const ok = r.same_tokens === r.runs && g.every(x => x < 1) && j.replans_moved >= 2 * (r.runs + 1) - 1;
  console.log(`soak: ${r.runs + 1} generations in ${(r.seconds).toFixed(1)} s after the first; ${r.same_tokens} of ${r.runs} ` +
              `repeats gave its tokens; RSS growth per rank (MB): ${g.map(x => x.toFixed(3)).join(" ")}; ` +
              `${j.replans_total} re-placements, ${j.replans_moved} of them moving shards: ${ok ? "ok" : "FAILED"}`);
  process.exit(ok ? 0 : 1)' "$out/soak.json"
