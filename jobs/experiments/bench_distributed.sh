#!/usr/bin/env bash
# Distributed decode benchmark: every planner at several rank counts, over
# shared memory, one thread per rank, each rank bound to a core when there are
# enough cores, weights in the model file's dtypes and messages in the wire
# dtype. Writes results/bench_distributed-NAME.csv (one row per run), .json
# (the raw bench outputs), .txt (the table) and .png (tokens/s per planner and
# rank count), and prints a table with the speedup over the 1-rank run of the
# same sweep.
#
# usage: jobs/experiments/bench_distributed.sh [--model FILE] [--wire-dtype fp32|fp16|q8_0] [--ranks "1 2 4 5"]
#                                  [--planners "..."] [--steps N] [--repeat R] [--name NAME]
#   default model: models/cache/tinyllama-synth.h5 (TinyLlama-1.1B shape, synthetic weights,
#   written by `meshinfer synth` on first use, 4.4 GB); --steps default 44 (12-token prompt + 32
#   decoded); NAME defaults to the model file's name and the wire dtype
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
model="$root/models/cache/tinyllama-synth.h5"
ranks="1 2 4 5"
planners="layerwise roundrobin random greedy tp"
steps=44
repeat=2
wire=fp32
name=""
fail_status=2
while (($#)); do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --model|--ranks|--planners|--steps|--repeat|--wire-dtype|--name)
            need_value "$@" ;;&
        --model) model=$2; shift 2 ;;
        --ranks) ranks=$2; shift 2 ;;
        --planners) planners=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --repeat) repeat=$2; shift 2 ;;
        --wire-dtype) wire=$2; shift 2 ;;
        --name) name=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
case "$wire" in fp32|fp16|q8_0) ;; *) arg_fail "--wire-dtype '$wire' is not fp32, fp16 or q8_0" ;; esac
opt_ints --ranks "$ranks" 1 256
ranks=${ranks//,/ }
opt_planners --planners "$planners" layerwise roundrobin random greedy tp
opt_int --steps "$steps" 1 1000000
opt_int --repeat "$repeat" 1 1000000
# (the default model is written on first use; one named must be a file)
[[ $model == "$root/models/cache/tinyllama-synth.h5" ]] || opt_file --model "$model"
[[ -n "$name" ]] || name="$(basename "$model" .h5)-$wire"
[[ "$name" =~ ^[A-Za-z0-9._][A-Za-z0-9._-]*$ ]] || arg_fail "--name '$name' may hold letters, digits, '.', '_', '-' (not first)"
meshinfer_bin
if [[ ! -f "$model" ]]; then
    [[ "$model" == "$root/models/cache/tinyllama-synth.h5" ]] ||
        { fail_status=1; fail "$model not found"; }
    "$bin" synth --shape tinyllama-1.1b --seed 1 --out "$model"
fi
out="$root/results"; mkdir -p "$out"
base="$out/bench_distributed-$name"
csv="$base.csv.partial"; json="$base.json.partial"
trap 'rm -f "$csv" "$json"' EXIT
echo "model,synthetic_weights,planner,ranks,decode_tokens_per_s,tpot_ms,ttft_ms,bytes_moved_per_forward,predicted_token_ms,max_rank_weight_MB,stream_triad_gbs,precision,wire_dtype" > "$csv"
echo "[" > "$json"
ncores=$(nproc)
first=1
for n in $ranks; do
    for p in $planners; do
        # one rank: every planner is the same single-device run
        if [[ $n -eq 1 && $p != "${planners%% *}" ]]; then continue; fi
        bind="--bind-to core"; ((n > ncores)) && bind="--bind-to none --mca mpi_yield_when_idle 1"
        echo "bench_distributed: $p on $n rank(s), $wire messages..." >&2
        if ! r=$(mpirun --allow-run-as-root -q --oversubscribe $bind --mca btl self,vader -x OPENBLAS_NUM_THREADS=1 \
              -np "$n" "$bin" bench -m "$model" --steps "$steps" --repeat "$repeat" --planner "$p" \
              --wire-dtype "$wire" --no-baseline --stream-mb 64 --json 2>"$base.err"); then
            echo "bench_distributed: error: $p on $n rank(s) failed:" >&2
            grep -m 3 . "$base.err" >&2 || true
            rm -f "$base.err"
            exit 1
        fi
        rm -f "$base.err"
        ((first)) || echo "," >> "$json"; first=0
        echo "$r" >> "$json"
        node -e '
          const j = JSON.parse(process.argv[1]);
          const moved = j.ranks.reduce((a, r) => a + r.bytes_sent_per_forward, 0);
          const maxw = Math.max(...j.ranks.map(r => r.weight_bytes)) / 1e6;
          console.log([j.name, j.synthetic_weights, process.argv[2], j.ranks.length, j.decode_tokens_per_s,
                       j.tpot_ms, j.ttft_ms, moved.toFixed(0), j.plan.predicted_token_ms, maxw.toFixed(1),
                       j.stream_triad_gbs, j.precision.replace(/,/g, ";"), j.wire_dtype].join(","));' "$r" "$p" >> "$csv"
    done
done
echo "]" >> "$json"
mv "$csv" "$base.csv"; mv "$json" "$base.json"
node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(l => l.split(","));
  const h = rows.shift(); const base = rows.find(r => r[3] === "1");
  const b = base ? +base[4] : NaN;
  console.log(`${rows[0][0]}${rows[0][1] === "true" ? " (synthetic weights)" : ""}, ${rows[0][11]} weights, ` +
              `${rows[0][12]} messages, 1 thread per rank, shared memory`);
  console.log("planner     ranks  tokens/s  vs 1 rank  TPOT ms  bytes/forward  max rank MB");
  for (const r of rows) console.log(`${r[2].padEnd(10)} ${r[3].padStart(6)} ${(+r[4]).toFixed(2).padStart(9)} ${(r[4] / b).toFixed(2).padStart(9)}x ${(+r[5]).toFixed(1).padStart(8)} ${r[7].padStart(12)} ${r[9].padStart(12)}`);
' "$base.csv" | tee "$base.txt"
# wide table for the plot: one row per rank count, one column per planner
node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").slice(1).map(l => l.split(","));
  const planners = process.argv[2].split(" "), ranks = [...new Set(rows.map(r => +r[3]))].sort((a, b) => a - b);
  let out = "ranks " + planners.join(" ") + "\n";
  for (const n of ranks) out += n + " " + planners.map(p => {
    const r = rows.find(r => +r[3] === n && (r[2] === p || n === 1)); return r ? r[4] : "NaN"; }).join(" ") + "\n";
  require("fs").writeFileSync(process.argv[3], out);
' "$base.csv" "$planners" "$base.dat"
mname=$(sed -n 2p "$base.csv" | cut -d, -f1)
synth=$(sed -n 2p "$base.csv" | cut -d, -f2)
prec=$(sed -n 2p "$base.csv" | cut -d, -f12)
label="$mname, $prec weights, $wire messages, 1 thread per rank, shared memory"
[[ "$synth" == "true" ]] && label="$label, synthetic weights"
if command -v gnuplot >/dev/null; then
    plot_png "$base.png" "900,500" <<GP
set title "Decode tokens/s by planner and rank count ($label)"
set xlabel "ranks"; set ylabel "decode tokens/s"; set key outside right; set grid
set xtics 1
plot for [i=2:$(( $(wc -w <<<"$planners") + 1 ))] "$base.dat" using 1:i with linespoints lw 2 title columnheader
GP
    echo "bench_distributed: wrote $base.{csv,json,txt,dat,png}" >&2
fi
