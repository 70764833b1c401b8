#!/usr/bin/env bash
# CATS Fig. 5 for its own workload: which time-series models (docs/patchtst.md:
# 6 layers, 16 heads, FFN 2F) fit on D = 1..16 devices of CATS's nRF52840
# budget (1 MiB flash, 256 KiB RAM), with int8 weights (q8_0: 34 bytes per 32
# weights, the nearest dtype we have to CMSIS-NN's int8), for feature size F
# and N patches (tokens), at somegather pruning r = 0, 0.5, 0.9. Flash holds
# the weights a device multiplies with (pruned columns of other devices need
# none); RAM holds its activations and K/V (fp32). Code, stack and the radio
# stack are not counted: a real device has less. From `meshinfer plan
# --memory-model` (no model file, no MPI).
# Writes OUT/feasibility.csv (every D, F, N, r with flash and RAM bytes and
# whether it fits), OUT/feasibility.md (the largest F that fits per N) and
# OUT/feasibility.png.
#
# usage: jobs/experiments/series_feasibility.sh [--out DIR]   (default results/series)
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
out="$root/results/series"
while (($#)); do
    case "$1" in
        --out) need_value "$@"; out=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
meshinfer_bin
out_dir "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
flash=$((1024 * 1024)) ram=$((256 * 1024))
dims=(32 64 128 256 512 1024) patches=(8 16 32 64 128 256 512)
echo "D,F,N,prune,flash_bytes,ram_bytes,fits" > "$tmp/all.csv"
for F in "${dims[@]}"; do
    for N in "${patches[@]}"; do
        "$bin" plan --memory-model --shape patchtst --dtype q8_0 --wire-dtype q8_0 --dim "$F" --positions "$N" \
            --prune 0,0.5,0.9 --max-devices 16 --csv "$tmp/m.csv" > /dev/null
        awk -F, -v F="$F" -v N="$N" -v fl=$flash -v ra=$ram 'NR > 1 && $3 == "somegather" {
                 fits = ($11 <= fl && $14 <= ra) ? 1 : 0
                 printf "%d,%d,%d,%s,%d,%d,%d\n", $2, F, N, $5, $11, $14, fits }' "$tmp/m.csv" >> "$tmp/all.csv"
    done
    echo "series_feasibility: F = $F done" >&2
done
mv "$tmp/all.csv" "$out/feasibility.csv"
# the largest F that fits, per D, r and N
awk -F, 'NR > 1 && $7 == 1 { k = $1 "," $4 "," $3; if ($2 > best[k]) best[k] = $2 }
         END { for (k in best) print k "," best[k] }' "$out/feasibility.csv" | sort -t, -k1,1n -k2,2n -k3,3n > "$tmp/best.csv"
{
    echo "# Largest feature size F that fits an nRF52840 (1 MiB flash, 256 KiB RAM), int8 weights"
    echo
    echo "6 layers, 16 heads, FFN 2F, horizon 24; rows: devices D and somegather pruning r; columns: N patches."
    echo "\"-\": not even F = ${dims[0]} fits. From \`jobs/experiments/series_feasibility.sh\` (\`meshinfer plan --memory-model\`)."
    echo
    printf "| D | r |"; for N in "${patches[@]}"; do printf " N=%s |" "$N"; done; echo
    printf "|---|---|"; for N in "${patches[@]}"; do printf -- "---|"; done; echo
    for D in 1 2 4 8 16; do
        for r in 0 0.5 0.9; do
            printf "| %s | %s |" "$D" "$r"
            for N in "${patches[@]}"; do
                v=$(awk -F, -v D="$D" -v r="$r" -v N="$N" '$1 == D && $2 == r && $3 == N {print $4}' "$tmp/best.csv")
                printf " %s |" "${v:--}"
            done
            echo
        done
    done
} > "$tmp/feasibility.md"
if command -v gnuplot > /dev/null; then
    for D in 1 4 16; do for r in 0 0.9; do
        awk -F, -v D="$D" -v r="$r" '$1 == D && $2 == r {print $3, $4}' "$tmp/best.csv" > "$tmp/d${D}_r$r.dat"
    done; done
    plots=""
    for D in 1 4 16; do for r in 0 0.9; do
        [[ -s "$tmp/d${D}_r$r.dat" ]] &&
            plots+="'$tmp/d${D}_r$r.dat' using 1:2 with linespoints lw 2 title 'D = $D, r = $r', "
    done; done
    plot_png "$tmp/feasibility.png" "900,560" <<EOF
set title "Largest time-series model per nRF52840 (1 MiB flash, 256 KiB RAM), int8 weights"
set xlabel "patches N (tokens)"
set ylabel "feature size F"
set logscale xy 2
set key outside right
set grid
plot ${plots%, }
EOF
fi
# written whole in the scratch folder, then moved: a failure leaves the last run's files
mv "$tmp/feasibility.md" "$out/feasibility.md"
[[ -f "$tmp/feasibility.png" ]] && mv "$tmp/feasibility.png" "$out/feasibility.png"
echo "series_feasibility: wrote $out/feasibility.{csv,md,png}" >&2
