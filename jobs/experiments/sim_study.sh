#!/usr/bin/env bash
# HeadSplit's simulation study on meshinfer's discrete-event simulator
# (`meshinfer simulate`: no MPI, no model file, nothing computed): the
# TinyLlama-1.1B shape (its config, fp32 weights) generating TOKENS tokens
# after a 32-token prompt on DEVICES heterogeneous devices drawn by
# `meshinfer cluster-gen` (speed uniform 0.5-2, seeded), under two kinds of
# links:
#   gbps  1-10 Gbit/s per pair (log-uniform), 0.05-0.5 ms one way: the links
#         HeadSplit's simulator assumed
#   wifi  20-100 Mbit/s per pair, 4-6 ms one way (8-12 ms round trips, the
#         testbed's WiFi), 1 ms of jitter (every pass then walked)
# Schemes, budgets of 350-700 MB per worker (1.5 GB for the controller, which
# holds the embeddings and classifier): layerwise (EdgeShard-like), tp
# (Galaxy-like tensor parallelism), greedy (HeadSplit's head-level placement)
# with the KV cache budgeted for the whole context, somegather (CATS; our
# runtime needs the ranks to divide the 4 KV heads: refused on 25, the
# reason recorded) and hybrid (Voltron). Head-level with and without
# migration, budgets of 150-300 MB: greedy planned for 128 positions without
# re-placement (it runs out of memory) and with it (--replan). Then greedy
# against the exact planner (GLPK, --exact-seconds each) and layerwise on 3,
# 4 and 5 devices of 2.5-3.5 GB, both kinds of links.
# Writes OUT/sim_study.csv, OUT/sim_study.md (the tables), OUT/runs/*.json
# (each run's `simulate --json`), OUT/clusters/*.json and OUT/sim_study.png
# (seconds since the start against tokens, per scheme and kind of link).
#
# usage: jobs/experiments/sim_study.sh [--devices N] [--tokens N] [--seed S] [--exact-seconds S] [--out DIR]
#   defaults: 25 devices, 1000 tokens, seed 1, 60 s, results/sim_study
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
out="$root/results/sim_study"
devices=25 tokens=1000 seed=1 exact_s=60
while (($#)); do
    case "$1" in
        --devices|--tokens|--seed|--exact-seconds|--out) need_value "$@" ;;&
        --devices) devices=$2; shift 2 ;;
        --tokens) tokens=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --exact-seconds) exact_s=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
opt_int --devices "$devices" 6 256
opt_int --tokens "$tokens" 1 2000
opt_int --seed "$seed" 0 999999999
opt_num --exact-seconds "$exact_s" 0.1 100000
meshinfer_bin
out_dir "$out" "$out/runs" "$out/clusters"
shape=tinyllama-1.1b
declare -A links=([gbps]="--latency-ms 0.05:0.5 --bandwidth-mbit 1000:10000"
                  [wifi]="--latency-ms 4:6 --bandwidth-mbit 20:100 --jitter-ms 1")
csv="$out/sim_study.csv.partial"
echo "study,links,devices,scheme,planner,replan,kv_positions,tokens,ttft_ms,tpot_ms,total_s,mb_moved,replans,moved,stopped,walks,sim_s,note" > "$csv"

# cluster NAME N MEM CONTROLLER_MB LINKS...: a cluster file, seeded
cluster() {
    local name=$1 n=$2 mem=$3 ctl=$4; shift 4
    local -a c=("$bin" cluster-gen --devices "$n" --seed "$seed" --mem-mb "$mem" --out "$out/clusters/$name.json" "$@")
    [[ $ctl == 0 ]] || c+=(--controller-mem-mb "$ctl")
    "${c[@]}" > /dev/null
}

# run STUDY LINKS CLUSTER SCHEME ARGS...: one simulation into the CSV (a refusal is a row with its reason)
run() {
    local study=$1 link=$2 cl=$3 scheme=$4; shift 4
    local js="$out/runs/${study}_${link}_${scheme}.json" note=""
    say "$study, $link links, $scheme..."
    if ! "$bin" simulate --shape "$shape" --cluster "$out/clusters/$cl.json" -n "$tokens" --json "$@" > "$js" 2> "$out/err"; then
        note=$(sed -n 's/^meshinfer: error: simulate: //p' "$out/err" | head -1 | tr ',' ';' | cut -c1-160)
        [[ -n $note ]] || fail "$study $link $scheme: $(tail -1 "$out/err")"
        rm -f "$js"
        echo "$study,$link,$(json "$out/clusters/$cl.json" 'j.devices.length'),$scheme,,,,0,,,,,,,,,,refused: $note" >> "$csv"
        return 0
    fi
    grep -q "proven optimal" "$out/err" && note="exact: proven optimal"
    grep -q "time limit stopped" "$out/err" && note="exact: best at the time limit (${exact_s} s)"
    json "$js" '[a[0], a[1], j.devices, a[2], j.planner, j.replan, a[3], j.tokens, j.ttft_ms.toFixed(3),
                 j.tpot_ms.toFixed(3), j.total_s.toFixed(3), (j.bytes / 1e6).toFixed(3), j.replans.length,
                 j.replans.filter(r => r.moved).length, j.stopped ? "at token " + j.tokens : "", j.walks,
                 j.sim_seconds.toFixed(3), a[4] + (j.stopped ? " " + j.stop_reason.replace(/,/g, ";") : "")].join(",")' \
        "$study" "$link" "$scheme" "$(json "$js" j.kv_positions)" "$note" >> "$csv"
}

for link in gbps wifi; do
    read -r -a l <<< "${links[$link]}"
    cluster "main_$link" "$devices" 350:700 1500 "${l[@]}"
    cluster "tight_$link" "$devices" 150:300 1500 "${l[@]}"
    for p in layerwise tp greedy somegather hybrid; do
        run schemes "$link" "main_$link" "$p" --planner "$p"
    done
    run migration "$link" "tight_$link" greedy-whole-context --planner greedy
    run migration "$link" "tight_$link" greedy-128-static --planner greedy --kv-positions 128
    run migration "$link" "tight_$link" greedy-128-migration --planner greedy --kv-positions 128 --replan
    for n in 3 4 5; do
        cluster "small${n}_$link" "$n" 2500:3500 0 "${l[@]}"
        for p in layerwise greedy exact; do
            extra=()
            [[ $p != exact ]] || extra=(--exact-seconds "$exact_s")
            run "exact$n" "$link" "small${n}_$link" "$p" --planner "$p" "${extra[@]}"
        done
    done
done
rm -f "$out/err"
mv "$csv" "$out/sim_study.csv"

# the tables: every run, then greedy against exact
node - "$out/sim_study.csv" "$tokens" "$devices" "$seed" > "$out/sim_study.md" <<'JS'
const [path, tokens, devices, seed] = process.argv.slice(2);
const lines = require("fs").readFileSync(path, "utf8").trim().split("\n");
const head = lines[0].split(","), rows = lines.slice(1).map(l => Object.fromEntries(l.split(",").map((v, i) => [head[i], v])));
console.log(`TinyLlama-1.1B shape (fp32), ${tokens} tokens after a 32-token prompt, cluster-gen seed ${seed}; simulated seconds.\n`);
console.log("| study | links | devices | scheme | TTFT ms | TPOT ms | total s | MB moved | re-placements (moved) | note |");
console.log("|---|---|---|---|---|---|---|---|---|---|");
for (const r of rows)
    console.log(`| ${r.study} | ${r.links} | ${r.devices} | ${r.scheme} | ${r.ttft_ms || "-"} | ${r.tpot_ms || "-"} | ` +
                `${r.total_s || "-"} | ${r.mb_moved || "-"} | ${r.replans ? `${r.replans} (${r.moved})` : "-"} | ` +
                `${[r.stopped ? "stopped " + r.stopped : "", r.note].filter(x => x).join("; ")} |`);
console.log("\nGreedy against the exact planner (TPOT, ms; greedy's excess over exact):\n");
console.log("| devices | links | layerwise | greedy | exact | greedy / exact |");
console.log("|---|---|---|---|---|---|");
for (const n of ["3", "4", "5"])
    for (const link of ["gbps", "wifi"]) {
        const get = s => rows.find(r => r.study === "exact" + n && r.links === link && r.scheme === s) || {};
        const g = +get("greedy").tpot_ms, e = +get("exact").tpot_ms;
        console.log(`| ${n} | ${link} | ${get("layerwise").tpot_ms || "-"} | ${g || "-"} | ${e || "-"} | ` +
                    `${g && e ? (g / e).toFixed(3) + " (+" + ((g / e - 1) * 100).toFixed(0) + "%)" : "-"} |`);
    }
JS

# seconds since the start against tokens: one panel per kind of link
for f in "$out"/runs/schemes_*.json "$out"/runs/migration_*.json; do
    [[ -e $f ]] || continue
    json "$f" 'j.time_s.map((t, k) => k + " " + t).join("\n")' > "${f%.json}.dat"
done
plot_png "$out/sim_study.png" 1400,560 <<GP
set multiplot layout 1,2 title "TinyLlama-1.1B shape on $devices simulated heterogeneous devices: seconds to generate each token" font ",12"
set xlabel "token"; set ylabel "seconds since the start"; set grid; set key top left
do for [link in "gbps wifi"] {
    set title link eq "gbps" ? "1-10 Gbit/s, 0.05-0.5 ms" : "WiFi-like: 20-100 Mbit/s, 8-12 ms RTT, 1 ms jitter"
    plot for [s in "layerwise tp greedy hybrid"] sprintf("$out/runs/schemes_%s_%s.dat", link, s) using 1:2 with lines lw 2 title s, \
         sprintf("$out/runs/migration_%s_greedy-128-migration.dat", link) using 1:2 with lines lw 2 dt 2 \
             title "greedy-128-migration (150-300 MB)", \
         sprintf("$out/runs/migration_%s_greedy-128-static.dat", link) using 1:2 with lines lw 4 \
             title "greedy-128-static (150-300 MB; stops: out of memory)"
}
unset multiplot
GP
rm -f "$out"/runs/*.dat
cat "$out/sim_study.md"
say "wrote $out/sim_study.{csv,md,png}, $out/runs/, $out/clusters/"
