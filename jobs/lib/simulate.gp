# Figures of a simulated generation (`meshinfer simulate --plot DIR`), from
# the CSV files simulate writes into DIR.
# usage: gnuplot -c jobs/lib/simulate.gp FIGURE DIR PNG TITLE N_DEVICES
#   FIGURE  latency: each token's latency and the time since the start, re-placements marked
#           devices: per device and token, the share of the token's time spent computing and
#                    the share of the memory budget held (weights + KV cache)
#           links:   payload over the run per sender -> receiver pair (log scale)
#   DIR     where tokens.csv, devices.csv and links.csv are
#   PNG     the figure to write
if (ARGC < 5) { print "simulate.gp: usage: gnuplot -c simulate.gp FIGURE DIR PNG TITLE N_DEVICES"; exit status 1 }
fig = ARG1
dir = ARG2
n = int(ARG5)
set terminal pngcairo size 1200,640 font ",10"
set output ARG3
set datafile separator ","
set grid

if (fig eq "latency") {
    set title ARG4 . ": latency per token" font ",11"
    set xlabel "token"
    set ylabel "latency, ms (token 0: the prompt's prefill)"
    set y2label "time since the start, s"
    set ytics nomirror
    set y2tics
    set logscale y
    set key top left
    plot dir . "/tokens.csv" skip 1 using 1:3 with lines lw 2 lc rgb "#3182bd" title "latency", \
         dir . "/tokens.csv" skip 1 using 1:($5 > 0 ? $3 : NaN) with points pt 7 ps 1.2 lc rgb "#d95f02" \
             title "after a re-placement", \
         dir . "/tokens.csv" skip 1 using 1:2 axes x1y2 with lines lw 1 dt 2 lc rgb "#555555" title "time since the start"
    exit
}

if (fig eq "devices") {
    set multiplot layout 2,1 title ARG4 font ",11"
    set xlabel "token"
    set ylabel "device (rank)"
    set yrange [-0.5:n - 0.5]
    set autoscale xfix
    set cbrange [0:1]
    set palette defined (0 "#ffffff", 0.5 "#6baed6", 1 "#08306b")
    set title "share of each token's time computing"
    plot dir . "/devices.csv" skip 1 using 1:2:($4 / ($4 + $5 > 0 ? $4 + $5 : 1)) with image notitle
    set title "share of the memory budget held (weights + KV cache)"
    set palette defined (0 "#ffffff", 0.85 "#fd8d3c", 1 "#a50f15")
    plot dir . "/devices.csv" skip 1 using 1:2:7 with image notitle
    unset multiplot
    exit
}

if (fig eq "links") {
    set title ARG4 . ": payload per link over the run" font ",11"
    set xlabel "receiver (rank)"
    set ylabel "sender (rank)"
    set xrange [-0.5:n - 0.5]
    set yrange [-0.5:n - 0.5]
    set size ratio -1
    set logscale cb
    set cblabel "bytes"
    set palette defined (0 "#f7fbff", 1 "#6baed6", 2 "#08306b")
    # (commands and window posts carry no payload: not drawn)
    plot dir . "/links.csv" skip 1 using 2:1:(0.5):(0.5):($5 > 0 ? $5 : NaN) with boxxyerror fs solid lc palette notitle
    exit
}
print "simulate.gp: unknown figure " . fig . " (latency, devices, links)"
exit status 1
