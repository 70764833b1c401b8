#!/usr/bin/env bash
# PNG figures of a sweep summary (jobs/lib/sweep_summary.js output) with gnuplot.
# usage: jobs/lib/sweep_plots.sh OUT_PREFIX   (reads OUT_PREFIX.csv, _active.dat, _rtt.dat, _acceptance.dat)
set -euo pipefail
p=${1:?usage: sweep_plots.sh OUT_PREFIX}
csv="$p.csv"
[[ $p != *'"'* && $p != *"'"* ]] || { echo "sweep_plots: error: quotes in the prefix '$p' are not supported" >&2; exit 1; }
[[ -r $csv ]] || { echo "sweep_plots: error: '$csv' not found (run jobs/lib/sweep_summary.js first)" >&2; exit 1; }
[[ $(head -1 "$csv") == model,synthetic_weights,planner,* && $(wc -l < "$csv") -ge 2 ]] ||
    { echo "sweep_plots: error: '$csv' is not a sweep summary with at least one run" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "sweep_plots: gnuplot not installed (jobs/dev/build.sh installs it); CSV only" >&2; exit 0; }
label="$(sed -n 2p "$csv" | cut -d, -f1)"
[[ "$(sed -n 2p "$csv" | cut -d, -f2)" == "true" ]] && label="$label, synthetic weights"
case "$(sed -n 2p "$csv" | cut -d, -f7)" in
    net) where="real links" ;;
    hosts) where="hosts testbed" ;;
    *) where="emulated devices" ;;
esac
positions="$(cut -d, -f12 "$csv" | tail -n +2 | sort -u | paste -sd/)"
xtic='sprintf("%s%s r%d d%s l%s", strcol(3), strcol(4) eq "1" ? "+spec".strcol(5) : "", column(6), strcol(7), strcol(8))'
made=()
# on any gnuplot failure: remove what it left half made, say so in one line
plot() {
    local out=$1
    made+=("$out")
    if ! gnuplot 2> "$p.gnuplot.log"; then
        rm -f "${made[@]}"
        echo "sweep_plots: error: gnuplot failed on $out: $(grep -m1 . "$p.gnuplot.log")" >&2
        rm -f "$p.gnuplot.log"; exit 1
    fi
    rm -f "$p.gnuplot.log"
}
plot "${p}_time.png" <<GP
set terminal pngcairo size 1100,520
set datafile separator ","
set style data histograms; set style fill solid 0.8; set boxwidth 0.8; set xtics rotate by -30
set key outside right; set grid ytics; set bmargin 7
set output "${p}_time.png"
set title "Seconds for $positions positions ($label, $where)"; set ylabel "seconds"
plot "$csv" every ::1 using 13:xtic($xtic) title "seconds"
set output "${p}_bytes.png"
set title "MB moved over the run ($label)"; set ylabel "MB"
plot "$csv" every ::1 using (\$16/1e6):xtic($xtic) title "MB sent, all ranks"
set output "${p}_breakdown.png"
set title "Where the time goes, summed over ranks ($label)"; set ylabel "seconds"; set style histogram rowstacked
plot "$csv" every ::1 using 17:xtic($xtic) title "attention + projection", \
     "" every ::1 using 18 title "FFN", "" every ::1 using 19 title "communication", "" every ::1 using 20 title "idle"
GP
made+=("${p}_bytes.png" "${p}_breakdown.png")
# one column per rank after the quoted label: the most ranks of any run, plus one
ncol=$(awk -F, 'NR > 1 {n = split($21, a, " "); if (n > m) m = n} END {print m + 1}' "$csv")
if ((ncol > 1)) && [[ -s "${p}_active.dat" ]]; then
    plot "${p}_active.png" <<GP
set terminal pngcairo size 1100,520
set output "${p}_active.png"
set title "Compute seconds per device ($label)"; set ylabel "seconds"
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8
set xtics rotate by -30; set key outside right; set grid ytics; set bmargin 7
plot for [c=2:$ncol] "${p}_active.dat" using c:xtic(1) title sprintf("rank %d", c - 2)
GP
fi
nblocks=$(grep -c '^"' "${p}_rtt.dat" 2>/dev/null || true)
if ((nblocks > 0)) && (($(awk -F, 'NR > 1 {print $7}' "$csv" | sort -u | wc -l) > 1)); then
    plot "${p}_rtt.png" <<GP
set terminal pngcairo size 900,520
set output "${p}_rtt.png"
set title "Seconds for $positions positions against link RTT ($label)"
set xlabel "measured RTT to the controller, ms"; set ylabel "seconds"; set grid; set key outside right
plot for [i=0:$((nblocks - 1))] "${p}_rtt.dat" index i using 1:2 with linespoints title columnheader(1)
GP
fi
nacc=$(grep -c '^"' "${p}_acceptance.dat" 2>/dev/null || true)
if ((nacc > 0)); then
    plot "${p}_acceptance.png" <<GP
set terminal pngcairo size 900,480
set output "${p}_acceptance.png"
set title "Acceptance per layer transition ($label)"; set xlabel "from layer"; set ylabel "acceptance"
set yrange [-0.02:1.02]; set grid; set key outside right
plot for [i=0:$((nacc - 1))] "${p}_acceptance.dat" index i using 1:2 with linespoints title columnheader(1)
GP
fi
# the hosts testbed: TPOT, each host's link bytes and CPU time, per configuration
if [[ -s "${p}_hosts.dat" ]]; then
    nh=$(awk 'NR == 1 {n = split($0, a, "\" "); m = split(a[2], b, " "); print (m - 1) / 2}' "${p}_hosts.dat")
    plot "${p}_hosts.png" <<GP
set terminal pngcairo size 1100,1200
set output "${p}_hosts.png"
set multiplot layout 3,1 title "Hosts testbed: per configuration ($label)"
set style data histograms; set style fill solid 0.8; set grid ytics; set key outside right
set xtics rotate by -20; set yrange [0:*]
set title "time per output token"; set ylabel "TPOT, ms"
plot "${p}_hosts.dat" using 2:xtic(1) title "TPOT"
set style histogram clustered gap 1
set title "bytes on each host's link (sent + received, its veth's counters)"; set ylabel "MB"
plot for [h=0:$((nh - 1))] "${p}_hosts.dat" using (column(3 + h)):xtic(1) title sprintf("host %d", h)
set title "CPU time of each host (its cgroup: the rank and Open MPI's daemon)"; set ylabel "CPU seconds"
plot for [h=0:$((nh - 1))] "${p}_hosts.dat" using (column(3 + $nh + h)):xtic(1) title sprintf("host %d", h)
unset multiplot
GP
fi
echo "sweep_plots: wrote ${p}_*.png" >&2
