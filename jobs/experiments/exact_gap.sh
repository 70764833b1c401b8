#!/usr/bin/env bash
# The heuristic planners against the exact one over many random small
# clusters, on meshinfer's discrete-event simulator (`meshinfer simulate`: no
# MPI, no model file): PER-SIZE clusters each of 3, 4 and 5 devices drawn by
# `meshinfer cluster-gen` (seeded: SEED * 1000 + devices * 100 + index; speed
# uniform 0.5-2, workers' budgets 14-28 MB, the controller's 60 MB), the odd
# indices on Gbit-class links (1-10 Gbit/s per pair, 0.05-0.5 ms one way,
# HeadSplit's simulated links), the even ones on WiFi-class links
# (20-100 Mbit/s, 4-6 ms one way; no jitter: the planners' cost model has
# none, and a random delay would blur the comparison).
# The shape is stories15M's (6 layers, 6 KV heads, fp32: 24 MB of layers, so
# the budgets make placement matter): a decoder of several layers as the
# paper's, small enough that the exact program (HeadSplit's units: each KV
# head, projection and whole FFN on one rank) often proves optimality within
# the limit; TinyLlama's 22 layers do not in 60 s on 3 devices. 192 tokens
# after a 32-token prompt: the mean decode context is then 128, the context
# the exact program optimises (kv_positions / 2), so its objective and bound
# are in the TPOT's own units.
# Planners, each as `simulate --planner` makes it by default: layerwise,
# greedy, tp, somegather (where the ranks divide its 6 heads), hybrid; exact
# twice, without the controller's compute (as greedy and layerwise) and with
# it (--controller-works yes, as tp, somegather and hybrid; a superset of the
# first's placements, whose bound is then a lower bound for every head-level
# placement). A search the limit stopped keeps greedy's or layerwise's
# placement when it had not found one as fast (planner.h mi_plan_exact; the
# CSV's exact_source). A run that fails is a row with its reason.
# gap = planner's TPOT / the best exact TPOT - 1, and against the bound:
# TPOT / bound - 1 (how far the planner may be from the optimum at most).
# Writes OUT/exact_gap.csv (one row per cluster and planner), OUT/exact_gap.md
# (the distributions), OUT/exact_gap.png (each planner's gap CDF, per kind of
# link), OUT/clusters/*.json.
#
# usage: jobs/experiments/exact_gap.sh [--per-size N] [--exact-seconds S] [--seed S] [--out DIR]
#   defaults: 20 clusters per size (60 in all; at least 2), 20 s, seed 1, results/exact_gap
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
out="$root/results/exact_gap"
per=20 exact_s=20 seed=1
while (($#)); do
    case "$1" in
        --per-size|--exact-seconds|--seed|--out) need_value "$@" ;;&
        --per-size) per=$2; shift 2 ;;
        --exact-seconds) exact_s=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
opt_int --per-size "$per" 2 99
opt_num --exact-seconds "$exact_s" 0.1 100000
opt_int --seed "$seed" 0 999999
meshinfer_bin
out_dir "$out" "$out/clusters"
shape=stories15M tokens=192
declare -A links=([gbps]="--latency-ms 0.05:0.5 --bandwidth-mbit 1000:10000"
                  [wifi]="--latency-ms 4:6 --bandwidth-mbit 20:100")
csv="$out/exact_gap.csv.partial"
echo "cluster,devices,links,seed,planner,status,tpot_ms,exact_objective_ms,exact_bound_ms,exact_optimal,solver_s,exact_source,note" > "$csv"

# run CLUSTER DEVICES LINKS SEED NAME ARGS...: one simulation into the CSV (a failure is a row with its reason)
run() {
    local cl=$1 n=$2 link=$3 s=$4 name=$5; shift 5
    if ! "$bin" simulate --shape "$shape" --cluster "$out/clusters/$cl.json" -n "$tokens" --json "$@" \
            > "$out/run.json" 2> "$out/err"; then
        local note
        note=$(sed -n 's/^meshinfer: error: simulate: //p' "$out/err" | head -1 | tr ',' ';' | cut -c1-200)
        [[ -n $note ]] || fail "$cl $name: $(tail -1 "$out/err")"
        echo "$cl,$n,$link,$s,$name,failed,,,,,,,$note" >> "$csv"
        return 0
    fi
    json "$out/run.json" '[a[0], j.stopped ? "stopped" : "ok", j.tpot_ms.toFixed(4),
                           j.exact ? j.exact.objective_ms.toFixed(4) : "", j.exact && j.exact.bound_ms !== null ?
                           j.exact.bound_ms.toFixed(4) : "", j.exact ? j.exact.optimal : "", j.exact ?
                           j.exact.seconds.toFixed(2) : "", j.exact ? j.exact.source : "",
                           j.stopped ? j.stop_reason.replace(/,/g, ";") : ""].join(",")' \
        "$cl,$n,$link,$s,$name" >> "$csv"
}

t0=$SECONDS
for n in 3 4 5; do
    for ((i = 1; i <= per; i++)); do
        link=gbps
        ((i % 2)) || link=wifi
        s=$((seed * 1000 + n * 100 + i)) cl="n${n}_${i}"
        read -r -a l <<< "${links[$link]}"
        "$bin" cluster-gen --devices "$n" --seed "$s" --mem-mb 14:28 --controller-mem-mb 60 "${l[@]}" \
            --out "$out/clusters/$cl.json" > /dev/null
        say "$cl ($link, seed $s; $((SECONDS - t0)) s so far)"
        for p in layerwise greedy tp somegather hybrid; do
            run "$cl" "$n" "$link" "$s" "$p" --planner "$p"
        done
        run "$cl" "$n" "$link" "$s" exact --planner exact --exact-seconds "$exact_s"
        run "$cl" "$n" "$link" "$s" exact-ctl --planner exact --controller-works yes --exact-seconds "$exact_s"
    done
done
rm -f "$out/err" "$out/run.json"
mv "$csv" "$out/exact_gap.csv"

# the distributions, and each planner's sorted gaps for the CDF
node - "$out/exact_gap.csv" "$out" "$exact_s" "$seed" "$per" "$((SECONDS - t0))" > "$out/exact_gap.md" <<'JS'
const [path, out, limit, seed, per, wall] = process.argv.slice(2);
const fs = require("fs");
const lines = fs.readFileSync(path, "utf8").trim().split("\n");
const head = lines[0].split(",");
const rows = lines.slice(1).map(l => Object.fromEntries(l.split(",").map((v, i) => [head[i], v])));
const clusters = [...new Set(rows.map(r => r.cluster))];
const get = (c, p) => rows.find(r => r.cluster === c && r.planner === p);
const ok = r => r && r.status === "ok";
// per cluster: the best exact TPOT (either run) and the bound of the run with the controller (the superset)
const ref = {};
for (const c of clusters) {
    const e = [get(c, "exact"), get(c, "exact-ctl")].filter(ok);
    if (!e.length) continue;
    const x = get(c, "exact-ctl");
    ref[c] = {tpot: Math.min(...e.map(r => +r.tpot_ms)), links: e[0].links, devices: e[0].devices,
              bound: ok(x) && x.exact_bound_ms !== "" ? +x.exact_bound_ms : NaN};
}
const q = (v, f) => { const s = [...v].sort((a, b) => a - b); const k = (s.length - 1) * f, i = Math.floor(k);
                      return s.length ? s[i] + (s[Math.min(i + 1, s.length - 1)] - s[i]) * (k - i) : NaN; };
const pct = v => !isFinite(v) ? "-" : (v >= 0 ? "+" : "") + (100 * v).toFixed(1) + "%";
const max = v => v.length ? Math.max(...v) : NaN, min = v => v.length ? Math.min(...v) : NaN;
const planners = ["layerwise", "greedy", "tp", "somegather", "hybrid", "exact", "exact-ctl"];
const gaps = (p, keep) => clusters.filter(c => ref[c] && keep(ref[c]) && ok(get(c, p)))
                                  .map(c => ({g: +get(c, p).tpot_ms / ref[c].tpot - 1, b: +get(c, p).tpot_ms / ref[c].bound - 1}));
console.log(`${clusters.length} clusters (${per} each of 3, 4 and 5 devices, half Gbit-class, half WiFi-class links; ` +
            `cluster-gen seeds ${seed}NNN), stories15M's shape (fp32), 192 tokens after a 32-token prompt, ` +
            `simulated TPOT; the exact planner's limit ${limit} s per search; ${wall} s in all.\n`);
console.log("gap = TPOT / the best exact TPOT - 1 (exact: the better of its two runs); vs bound = TPOT / the " +
            "lower bound of the exact search with the controller - 1 (how far from the head-level optimum at most). " +
            "Negative: faster than exact (outside its placements: split FFNs, or the controller's compute).\n");
for (const [name, keep] of [["all links", () => true], ["Gbit-class links", r => r.links === "gbps"],
                            ["WiFi-class links", r => r.links === "wifi"]]) {
    console.log(`\n${name}:\n`);
    console.log("| planner | ran | failed | median gap | worst gap | best gap | faster than exact | median vs bound | worst vs bound |");
    console.log("|---|---|---|---|---|---|---|---|---|");
    for (const p of planners) {
        const g = gaps(p, keep), n = clusters.filter(c => ref[c] && keep(ref[c])).length;
        const G = g.map(x => x.g), Bd = g.map(x => x.b).filter(x => !isNaN(x));
        console.log(`| ${p} | ${g.length} | ${n - g.length} | ${pct(q(G, 0.5))} | ${pct(max(G))} | ` +
                    `${pct(min(G))} | ${G.filter(x => x < -1e-4).length} | ${pct(q(Bd, 0.5))} | ${pct(max(Bd))} |`);
    }
}
console.log("\nThe exact searches (per run: proven optimal, and objective / bound - 1 where the limit stopped it):\n");
console.log("| run | devices | links | searches | proven optimal | median objective / bound - 1 | worst | median s |");
console.log("|---|---|---|---|---|---|---|---|");
let dev = 0;
for (const p of ["exact", "exact-ctl"])
    for (const n of ["3", "4", "5"])
        for (const link of ["gbps", "wifi"]) {
            const r = rows.filter(r => r.planner === p && r.devices === n && r.links === link);
            const o = r.filter(ok), opened = o.filter(r => r.exact_optimal !== "true" && r.exact_bound_ms !== "");
            const gb = opened.map(r => +r.exact_objective_ms / +r.exact_bound_ms - 1);
            for (const x of o) dev = Math.max(dev, Math.abs(+x.tpot_ms / +x.exact_objective_ms - 1));
            console.log(`| ${p} | ${n} | ${link} | ${o.length} of ${r.length} | ${o.filter(r => r.exact_optimal === "true").length} | ` +
                        `${gb.length ? pct(q(gb, 0.5)) : "-"} | ${gb.length ? pct(Math.max(...gb)) : "-"} | ${q(o.map(r => +r.solver_s), 0.5).toFixed(1)} |`);
        }
const kept = rows.filter(r => ok(r) && r.exact_source && r.exact_source !== "exact");
console.log(`\nStopped searches that kept a heuristic's placement (which they had not beaten): ${kept.length}` +
            (kept.length ? ` (${kept.map(r => `${r.cluster} ${r.planner}: ${r.exact_source}`).join("; ")})` : "") + ".");
console.log(`\nThe simulated TPOT of an exact placement is within ${(100 * dev).toFixed(2)}% of its program's objective ` +
            "(the step at context 128), so the bounds are in the TPOT's units.");
console.log("\nGreedy against exact without the controller's compute (the same devices, HeadSplit's comparison; " +
            "vs bound: that search's own bound):\n");
console.log("| devices | links | clusters | median gap | worst gap | median vs bound | worst vs bound |");
console.log("|---|---|---|---|---|---|---|");
for (const n of ["3", "4", "5", "all"])
    for (const link of ["gbps", "wifi"]) {
        const pr = clusters.map(c => [get(c, "greedy"), get(c, "exact")]).filter(([a, b]) => ok(a) && ok(b) &&
                       (n === "all" || a.devices === n) && a.links === link);
        const g = pr.map(([a, b]) => +a.tpot_ms / +b.tpot_ms - 1);
        const gb = pr.filter(([a, b]) => b.exact_bound_ms !== "").map(([a, b]) => +a.tpot_ms / +b.exact_bound_ms - 1);
        console.log(`| ${n} | ${link} | ${g.length} | ${pct(q(g, 0.5))} | ${pct(max(g))} | ${pct(q(gb, 0.5))} | ${pct(max(gb))} |`);
    }
// exact must not lose to a heuristic whose placement it could have chosen: layerwise and greedy (no controller
// compute, whole FFNs) are in both runs' spaces; 0.2% is the TPOT's own distance from the program's objective
const worse = [];
for (const c of clusters)
    for (const e of ["exact", "exact-ctl"])
        for (const h of ["layerwise", "greedy"]) {
            const a = get(c, e), b = get(c, h);
            if (ok(a) && ok(b) && +a.tpot_ms > +b.tpot_ms * 1.002)
                worse.push(`${c} ${e} ${a.tpot_ms} ms > ${h} ${b.tpot_ms} ms${a.exact_optimal === "true" ? " (proven optimal!)" : ""}`);
        }
console.log(`\nExact slower than a heuristic whose placement it could have chosen (layerwise, greedy): ` +
            `${worse.length ? worse.join("; ") : "never"}.`);
console.log("\nFailures (planner: reason, clusters):\n");
const fails = {};
for (const r of rows.filter(r => !ok(r))) {
    const why = `${r.planner}: ${r.status === "stopped" ? "stopped: " : ""}${r.note.replace(/device dev\d+ \(rank \d+\)/, "device D")
                  .replace(/needs \d+ bytes.*/, "needs more than its budget").replace(/\d+ does not divide/, "R does not divide")
                  .replace(/on \d ranks/, "on R ranks")}`;
    fails[why] = (fails[why] || 0) + 1;
}
for (const [k, v] of Object.entries(fails)) console.log(`- ${k}: ${v}`);
// CDF data: one file per planner and kind of link
for (const link of ["gbps", "wifi"])
    for (const p of planners) {
        const G = gaps(p, r => r.links === link).map(x => 100 * x.g).sort((a, b) => a - b);
        fs.writeFileSync(`${out}/cdf_${link}_${p}.dat`, G.map((g, i) => `${g} ${(i + 1) / G.length}`).join("\n") + "\n");
    }
JS

plot_png "$out/exact_gap.png" 1400,560 <<GP
set multiplot layout 1,2 title "stories15M shape on 3-5 simulated devices: each planner's TPOT over the exact planner's (CDF over clusters)" font ",12"
set xlabel "gap to exact, % (TPOT / exact - 1)"; set ylabel "fraction of clusters"; set grid; set key bottom right
set yrange [0:1.02]
do for [link in "gbps wifi"] {
    set title link eq "gbps" ? "1-10 Gbit/s, 0.05-0.5 ms" : "WiFi-class: 20-100 Mbit/s, 4-6 ms one way"
    plot for [p in "layerwise greedy tp somegather hybrid"] sprintf("$out/cdf_%s_%s.dat", link, p) \
         using 1:2 with steps lw 2 title p
}
unset multiplot
GP
rm -f "$out"/cdf_*.dat
cat "$out/exact_gap.md"
say "wrote $out/exact_gap.{csv,md,png} and $out/clusters/ in $((SECONDS - t0)) s"
