#!/usr/bin/env bash
# Energy (HeadSplit's energy and energy-delay product, seed
# 003 4.4's DVFS under a latency constraint), measured on this machine's
# ranks with a power model per device (no power meter: every device draws its
# idle watts for the whole run and its active watts, at its DVFS level, while
# it computes, by the compute seconds the runtime measures; a DVFS level f is
# emulated by stretching compute by 1/f). stories15M, 3 ranks over shared
# memory, 120 tokens, for two power profiles:
#   pi:    HeadSplit's Raspberry Pi 4 (3.8 W idle, 4.9 W active), levels
#          1, 0.8, 0.6, 0.4 of the top frequency
#   phone: a phone SoC whose dynamic power dominates (0.5 W idle, 5 W active),
#          the same levels
# For each: layer-wise, greedy (head-level) and tp at top frequency, then
# layer-wise and tp with --energy under a target of 2x their own TPOT (the
# larger of measured and predicted).
# Writes DIR/energy.csv, energy.md and energy.png (joules per token against
# TPOT).
#
# usage: jobs/experiments/energy.sh [--out DIR]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
out="$root/results/energy"
while (($#)); do
    case "$1" in
        --out) need_value "$@"; out=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
command -v gnuplot >/dev/null || fail "gnuplot is not installed (apt-get install gnuplot-nox)"
meshinfer_bin
real_model
tmpd="$(mktemp -d /tmp/meshinfer-energy.XXXXXX)"
trap 'rm -rf "$tmpd"' EXIT
cp "$bin" "$tmpd/meshinfer" # the job's own copy: a rebuild while it runs must not change it
out_dir "$out"
mpi=(mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 3)

cluster() { # name idle active
    node -e 'const [n, idle, active, path] = process.argv.slice(1);
      const dev = i => ({name: (i ? "w" + i : "ctl"), mem_mb: 4000,
                         power: {idle_w: +idle, active_w: +active, freq: [1, 0.8, 0.6, 0.4]}});
      require("fs").writeFileSync(path, JSON.stringify({description: `jobs/experiments/energy.sh: ${n} power profile`,
        devices: [0, 1, 2].map(dev)}, null, 1));' "$1" "$2" "$3" "$tmpd/$1.json"
}
cluster pi 3.8 4.9
cluster phone 0.5 5

run() { # label cluster generate-args...
    local label=$1 cl=$2; shift 2
    echo "energy: $label..." >&2
    "${mpi[@]}" "$tmpd/meshinfer" generate -m "$model" -n 120 --ignore-eos --json --cluster "$tmpd/$cl.json" "$@" \
        > "$tmpd/$label.json" 2> "$tmpd/$label.err" ||
        fail "$label: $(grep -m1 error "$tmpd/$label.err" || tail -1 "$tmpd/$label.err")"
}
# the larger of the TPOT measured and the cost model's (--energy judges levels by the prediction)
tpot_of() { node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
  console.log(Math.max(j.tpot_ms, j.predicted_tpot_ms))' "$1"; }

labels=()
for prof in pi phone; do
    for pl in layerwise greedy tp; do
        run "$prof-$pl-top" "$prof" --planner "$pl"
        labels+=("$prof-$pl-top")
    done
    for pl in layerwise tp; do
        # the target: twice the TPOT of the run at top frequency (Voltron: the latency
        # constraint whose margin --energy spends)
        target=$(awk -v t="$(tpot_of "$tmpd/$prof-$pl-top.json")" 'BEGIN {printf "%.3f", 2 * t}')
        run "$prof-$pl-energy" "$prof" --planner "$pl" --tpot-ms "$target" --energy
        labels+=("$prof-$pl-energy")
    done
done
node - "$tmpd" "$out" "${labels[@]}" <<'JS'
const fs = require("fs");
const [dir, out, ...labels] = process.argv.slice(2);
let csv = "profile,planner,mode,tpot_ms,target_ms,joules,j_per_token,edp_js,seconds,freq,predicted_j_per_token\n";
let md = "| power profile | planner | DVFS | TPOT ms | target ms | J per token | energy-delay product (J s) | levels chosen |\n|---|---|---|---|---|---|---|---|\n";
const rows = {};
for (const l of labels) {
  const j = JSON.parse(fs.readFileSync(`${dir}/${l}.json`));
  const [prof, pl, mode] = l.split("-");
  const target = mode === "energy" ? (j.scaling.tpot_target_ms || 0) : 0;
  const e = j.energy;
  rows[l] = {j, e};
  csv += `${prof},${pl},${mode},${j.tpot_ms},${target},${e.joules},${e.j_per_token},${e.edp_js},${e.seconds},${e.freq.join(" ")},${e.predicted_j_per_token}\n`;
  md += `| ${prof} | ${pl} | ${mode === "energy" ? "--energy" : "top"} | ${j.tpot_ms.toFixed(2)} | ${target ? target.toFixed(2) : ""} | ` +
        `${e.j_per_token.toFixed(4)} | ${e.edp_js.toFixed(4)} | ${e.freq.join(" / ")} |\n`;
}
const rel = (a, b) => `${((rows[a].e.j_per_token / rows[b].e.j_per_token - 1) * 100).toFixed(0)}%`;
const relEdp = (a, b) => `${((rows[a].e.edp_js / rows[b].e.edp_js - 1) * 100).toFixed(0)}%`;
md += `\nAgainst layer-wise at top frequency, J per token: greedy ${rel("pi-greedy-top", "pi-layerwise-top")} (pi), ` +
      `tp ${rel("pi-tp-top", "pi-layerwise-top")} (pi); energy-delay product: greedy ${relEdp("pi-greedy-top", "pi-layerwise-top")}, ` +
      `tp ${relEdp("pi-tp-top", "pi-layerwise-top")} (pi). --energy against top frequency, J per token: ` +
      `layer-wise ${rel("pi-layerwise-energy", "pi-layerwise-top")} (pi), ${rel("phone-layerwise-energy", "phone-layerwise-top")} (phone); ` +
      `tp ${rel("pi-tp-energy", "pi-tp-top")} (pi), ${rel("phone-tp-energy", "phone-tp-top")} (phone).\n`;
fs.writeFileSync(`${out}/energy.csv`, csv);
fs.writeFileSync(`${out}/energy.md`, md);
// the plot's data: one block per profile
let dat = "";
for (const prof of ["pi", "phone"]) {
  for (const l of labels.filter(x => x.startsWith(prof + "-")))
    dat += `${rows[l].j.tpot_ms} ${rows[l].e.j_per_token * 1e3} "${l.slice(prof.length + 1)}"\n`;
  dat += "\n\n";
}
fs.writeFileSync(`${out}/energy.dat`, dat);
JS
plot_png "$out/energy.png" "900,450" ",10" <<GP
set title "energy per token against TPOT, stories15M on 3 ranks (power model; DVFS emulated)"
set xlabel "TPOT (ms)"
set ylabel "mJ per token"
set grid
set key top right
set offsets graph 0.05, graph 0.25, graph 0.1, graph 0.1
plot "$out/energy.dat" index 0 using 1:2 with points pt 7 ps 1.5 lc rgb "#1f77b4" title "HeadSplit's Raspberry Pi 4 (3.8 W idle, 4.9 W active)", \
     "" index 0 using 1:2:3 with labels offset 1,0.8 left font ",8" notitle, \
     "" index 1 using 1:2 with points pt 5 ps 1.5 lc rgb "#d62728" title "a phone SoC (0.5 W idle, 5 W active)", \
     "" index 1 using 1:2:3 with labels offset 1,-0.8 left font ",8" notitle
GP
rm -f "$out/energy.dat"
cat "$out/energy.md"
echo "energy: wrote $out/energy.csv, energy.md, energy.png" >&2
