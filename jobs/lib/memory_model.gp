# CATS Fig. 4 for our memory and traffic model: RAM per device and bytes
# moved per decoded token against the number of devices D, one line per
# scheme (somegather at each pruning ratio; hu2024edge, liu2025communication
# and bochem2025distributed).
# usage: gnuplot -c jobs/lib/memory_model.gp CSV PNG TITLE "R1 R2 ..."
#   CSV    the output of `meshinfer plan --memory-model --csv` (bytes)
#   PNG    the figure to write
#   TITLE  the model shape and settings, for the title
#   R...   the somegather pruning ratios in the CSV, space-separated
# `meshinfer plan --memory-model --png FILE` runs it; jobs/experiments/memory_model.sh
# makes the figures of the README.
if (ARGC < 4) { print "memory_model.gp: usage: gnuplot -c memory_model.gp CSV PNG TITLE RATIOS"; exit status 1 }
csv = ARG1
ratios = ARG4
set terminal pngcairo size 1400,680 font ",10"
set output ARG2
set datafile separator ","
set grid xtics ytics mytics
set logscale x 2
set logscale y 10
set xlabel "devices D"
set xtics (1, 2, 4, 8, 16, 32, 64, 128, 256)
set format y "%g"
stats csv skip 1 using 2 nooutput
set xrange [0.9:STATS_max * 1.12]

# column numbers of the CSV (see cmd_plan.c mem_write_csv)
D = 2; SCHEME = 3; PRUNE = 5; RUNNABLE = 6; RAM = 15; MOVED = 18
is_sg(r) = strcol(SCHEME) eq "somegather" && abs(column(PRUNE) - r) < 1e-9
is(s) = strcol(SCHEME) eq s
pos(v) = v > 0 ? v : NaN
# the same colour for a scheme in both panels: somegather ratios in cool colours, baselines in warm ones
sg_colours = "#5e2ca5 #1b9e77 #3182bd #66a61e #17becf #7570b3 #2c7fb8 #31a354"
sg_colour(i) = word(sg_colours, (i - 1) % 8 + 1)

set multiplot layout 1,2 title ARG3 font ",12"

set key below left spacing 1.1 maxrows 4 width 2
set title "RAM per device: weights + KV cache + activations (busiest device)"
set ylabel "MB per device (10^6 bytes)"
plot for [i=1:words(ratios)] csv skip 1 using (column(D)):(is_sg(real(word(ratios, i))) ? column(RAM) / 1e6 : NaN) \
         with linespoints lw 2 pt 7 ps 0.8 lc rgb sg_colour(i) title sprintf("somegather r = %s", word(ratios, i)), \
     csv skip 1 using (column(D)):(is_sg(real(word(ratios, 1))) && column(RUNNABLE) > 0 ? column(RAM) / 1e6 : NaN) \
         with points pt 6 ps 2.2 lc rgb "black" title "runs in meshinfer (D divides the KV heads)", \
     csv skip 1 using (column(D)):(is("token-split") ? column(RAM) / 1e6 : NaN) \
         with linespoints lw 2 dt 2 pt 5 ps 0.8 lc rgb "#d95f02" title "token split (hu2024edge)", \
     csv skip 1 using (column(D)):(is("token-split-4bit") ? column(RAM) / 1e6 : NaN) \
         with linespoints lw 2 dt 2 pt 9 ps 0.8 lc rgb "#a6761d" title "token split, 4-bit K/V (liu2025communication)", \
     csv skip 1 using (column(D)):(is("head-split") ? column(RAM) / 1e6 : NaN) \
         with linespoints lw 2 dt 2 pt 13 ps 0.8 lc rgb "#e7298a" title "head split, allreduce (bochem2025distributed)"

set title "Traffic per decoded token, all devices (payload delivered to each receiver)"
set ylabel "KB per token (10^3 bytes)"
plot for [i=1:words(ratios)] csv skip 1 using (column(D)):(is_sg(real(word(ratios, i))) ? pos(column(MOVED) / 1e3) : NaN) \
         with linespoints lw 2 pt 7 ps 0.8 lc rgb sg_colour(i) title sprintf("somegather r = %s", word(ratios, i)), \
     csv skip 1 using (column(D)):(is("token-split") ? pos(column(MOVED) / 1e3) : NaN) \
         with linespoints lw 2 dt 2 pt 5 ps 0.8 lc rgb "#d95f02" title "token split (hu2024edge)", \
     csv skip 1 using (column(D)):(is("token-split-4bit") ? pos(column(MOVED) / 1e3) : NaN) \
         with linespoints lw 2 dt 2 pt 9 ps 0.8 lc rgb "#a6761d" title "token split, 4-bit K/V (liu2025communication)", \
     csv skip 1 using (column(D)):(is("head-split") ? pos(column(MOVED) / 1e3) : NaN) \
         with linespoints lw 2 dt 2 pt 13 ps 0.8 lc rgb "#e7298a" title "head split, allreduce (bochem2025distributed)"

unset multiplot
