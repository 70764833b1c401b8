#!/usr/bin/env bash
# Seed 000's experiment as a sweep on the emulated testbed (jobs/testbed.sh):
# planners x speculation on/off x rank counts x link delay x tolerance. Writes
# results/sweep.csv (one row per run) and PNG plots with gnuplot:
#   sweep_time.png       seconds for the generated tokens per configuration
#   sweep_acceptance.png acceptance per layer transition (speculating runs)
#   sweep_bytes.png      bytes moved per forward pass
#   sweep_breakdown.png  where the time goes: attention, FFN, communication, idle (summed over ranks)
#
# usage: jobs/sweep.sh [--model FILE] [--tokens N] [--ranks "3 5"] [--delays "0 5"]
#                      [--planners "layerwise roundrobin random greedy"] [--tolerances "0.05"] [--cpu-pct P]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
model="$root/models/cache/stories15M.h5" tokens=64 ranks="5" delays="5" cpu=40
planners="layerwise roundrobin random greedy" tols="0.05"
while (($#)); do
    case "$1" in
        --model) model=$2; shift 2 ;;
        --tokens) tokens=$2; shift 2 ;;
        --ranks) ranks=$2; shift 2 ;;
        --delays) delays=$2; shift 2 ;;
        --planners) planners=$2; shift 2 ;;
        --tolerances) tols=$2; shift 2 ;;
        --cpu-pct) cpu=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
        *) echo "sweep: error: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
out="$root/results"; mkdir -p "$out"
csv="$out/sweep.csv"; part="$csv.partial"
echo "model,synthetic_weights,planner,speculate,tolerance,ranks,delay_ms,rtt_ms,tokens,seconds,tpot_ms,bytes_per_forward,attention_s,ffn_s,communication_s,idle_s,acceptance_per_layer" > "$part"
for n in $ranks; do for d in $delays; do for p in $planners; do for spec in 0 1; do
    [[ $p == layerwise && $spec == 1 ]] && continue   # nothing to overlap in a pipeline of whole layers
    for t in $tols; do
        [[ $spec == 0 && $t != "${tols%% *}" ]] && continue
        extra=""; [[ $spec == 1 ]] && extra="--speculate --tolerance $t"
        echo "sweep: $p spec=$spec tol=$t ranks=$n delay=${d}ms" >&2
        r=$("$root/jobs/testbed.sh" --ranks "$n" --cpu-pct "$cpu" --delay-ms "$d" --jitter-ms "$(awk "BEGIN{print $d/5}")" \
              -- generate -m "$model" -p "Once upon a time" -n "$tokens" --ignore-eos --planner "$p" $extra --json 2>/dev/null)
        node -e '
          const j = JSON.parse(process.argv[1]), a = process.argv.slice(2);
          const sum = k => j.ranks.reduce((s, r) => s + r.seconds[k], 0);
          const rtt = j.rtt_ms.slice(1); const mrtt = rtt.length ? rtt.reduce((x, y) => x + y) / rtt.length : 0;
          const acc = j.speculation.map(s => s.acceptance.toFixed(3)).join(" ");
          console.log([j.model.split("/").pop(), j.synthetic_weights, a[0], a[1], a[2], j.n_ranks, a[3], mrtt.toFixed(2),
            j.generated_tokens, ((j.ttft_ms + j.tpot_ms * (j.generated_tokens - 1)) / 1e3).toFixed(3), j.tpot_ms.toFixed(2),
            j.ranks.reduce((s, r) => s + r.bytes_sent_per_forward, 0).toFixed(0), sum("attention").toFixed(3),
            sum("ffn").toFixed(3), sum("communication").toFixed(3), sum("idle").toFixed(3), acc].join(","));
        ' "$r" "$p" "$spec" "$t" "$d" >> "$part"
    done
done; done; done; done
mv "$part" "$csv"
cat "$csv" >&2
if command -v gnuplot >/dev/null; then
    synth=$(sed -n 2p "$csv" | cut -d, -f2); label="$(sed -n 2p "$csv" | cut -d, -f1)"
    [[ "$synth" == "true" ]] && label="$label, synthetic weights"
    gnuplot <<GP
set terminal pngcairo size 1000,500
set datafile separator ","
set style data histograms; set style fill solid 0.8; set boxwidth 0.8; set xtics rotate by -30
set key outside right; set grid ytics
set output "$out/sweep_time.png"
set title "Seconds for $tokens tokens ($label, emulated devices)"
plot "$csv" every ::1 using 10:xtic(sprintf("%s%s r%d d%s", strcol(3), strcol(4) eq "1" ? "+spec" : "", column(6), strcol(7))) title "seconds"
set output "$out/sweep_bytes.png"
set title "Bytes moved per forward pass ($label)"
plot "$csv" every ::1 using 12:xtic(sprintf("%s%s r%d", strcol(3), strcol(4) eq "1" ? "+spec" : "", column(6))) title "bytes"
set output "$out/sweep_breakdown.png"
set title "Where the time goes, summed over ranks ($label)"; set style histogram rowstacked
plot "$csv" every ::1 using 13:xtic(sprintf("%s%s r%d", strcol(3), strcol(4) eq "1" ? "+spec" : "", column(6))) title "attention", \
     "" every ::1 using 14 title "FFN", "" every ::1 using 15 title "communication", "" every ::1 using 16 title "idle"
GP
    # acceptance per transition of the first speculating run
    line=$(awk -F, 'NR > 1 && $4 == 1 {print $17; exit}' "$csv")
    if [[ -n "$line" ]]; then
        tr ' ' '\n' <<<"$line" | awk '{print NR - 1, $1}' > "$out/sweep_acceptance.dat"
        gnuplot <<GP
set terminal pngcairo size 800,450
set output "$out/sweep_acceptance.png"
set title "Acceptance per layer transition ($label)"; set xlabel "from layer"; set ylabel "acceptance"
set yrange [0:1]; set style fill solid 0.8; set boxwidth 0.7; set grid ytics
plot "$out/sweep_acceptance.dat" using 1:2 with boxes notitle
GP
    fi
    echo "sweep: wrote $csv and $out/sweep_*.png" >&2
fi
