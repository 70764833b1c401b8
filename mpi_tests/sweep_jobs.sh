#!/usr/bin/env bash
# The sweep's batch variant end to end without Slurm (jobs/testbed/sweep.slurm falls back
# to mpirun): 3 ranks, layer-wise and greedy head-level placement, speculation at
# tolerance 0 (nothing may be accepted) and 1e9 (everything must be), then the
# summary (CSV, table with ratios to layer-wise, per-device compute time) and
# the plots. Also the summary's and sweep.sh's errors on bad input.
# usage: sweep_jobs.sh MODEL [MESHINFER]
set -uo pipefail
model=${1:?usage: sweep_jobs.sh MODEL [MESHINFER]}
# the binary under test, not whatever build/ holds
[[ -n "${2:-}" ]] && export MESHINFER_BIN="$2"
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

SLURM_NTASKS=3 MODEL="$model" TOKENS=6 PLANNERS="layerwise greedy" TOLERANCES="0 1e9" NAME=t OUT_DIR="$tmp" \
    OMPI_MCA_mpi_yield_when_idle=1 bash "$root/jobs/testbed/sweep.slurm" > "$tmp/out" 2>&1
rc=$?
check "sweep.slurm (mpirun fallback) exits 0" "[[ $rc == 0 ]]" || cat "$tmp/out"
csv="$tmp/t.csv"
check "one CSV row per run (layer-wise, greedy, greedy+spec tol 0, greedy+spec tol 1e9)" \
    "[[ \$(tail -n +2 '$csv' | wc -l) == 4 ]]"
col() { awk -F, -v c="$1" 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == c) k = i; next} {print $k}' "$csv"; }
row() { awk -F, -v p="$1" -v s="$2" -v t="$3" 'NR > 1 && $3 == p && $4 == s && (s == 0 || $5 == t)' "$csv"; }
hdr=$(head -1 "$csv")
field() { local n; n=$(tr ',' '\n' <<<"$hdr" | grep -nx "$1" | cut -d: -f1); cut -d, -f"$n"; }
check "256-position columns: 14 prompt tokens + 6 generated" "[[ \$(col positions | sort -u) == 20 ]]"
# which of the 5 transitions speculate is the cost model's choice from the
# round trips measured at start-up (microseconds here, and noisy): each run
# must speculate on at least one, and the tolerance decides what they accept
all_are() { local v; v=$(row greedy 1 "$1" | field acceptance_per_layer); [[ -n "$v" ]] && ! tr ' ' '\n' <<<"$v" | grep -qvx "$2"; }
check "tolerance 0 accepts nothing on any speculating transition" "all_are 0 0.000"
check "tolerance 1e9 accepts every speculating transition" "all_are 1e9 1.000"
check "per-device compute time: one value per rank" \
    "[[ \$(row layerwise 0 0 | field active_s_per_rank | wc -w) == 3 ]]"
lw=$(row layerwise 0 0 | field bytes_total); hl=$(row greedy 0 0 | field bytes_total)
check "head-level moves more bytes than layer-wise ($hl > $lw)" "(( hl > lw ))"
check "table: layer-wise is its own baseline (1.00x)" "grep -q '^| layer-wise | [0-9.]* | 1.00x |' '$tmp/t_table.md'"
ratio=$(awk -F'|' '/head-level greedy \|/ {gsub(/ /, "", $4); print $4}' "$tmp/t_table.md")
expect=$(awk -F, 'NR > 1 && $3 == "layerwise" {b = $13} NR > 1 && $3 == "greedy" && $4 == 0 {h = $13} END {printf "%.4f", b / h}' "$csv")
# the CSV rounds seconds to 0.1 ms and these runs take tens of ms: allow 0.015
check "table ratio is layer-wise seconds / head-level seconds ($ratio ~ $expect)" \
    "awk -v a='${ratio%x}' -v b='$expect' 'BEGIN {d = a - b; exit !(a > 0 && d < 0.015 && d > -0.015)}'"
t_lw=$(node -e 'console.log(require(process.argv[1]).tokens.join(" "))' "$tmp/t/runs/layerwise_spec0_tol0_r3_dnet_lnet.json")
t_t0=$(node -e 'console.log(require(process.argv[1]).tokens.join(" "))' "$tmp/t/runs/greedy_spec1_tol0_r3_dnet_lnet.json")
check "speculation at tolerance 0 gives layer-wise's tokens" "[[ -n '$t_lw' && '$t_lw' == '$t_t0' ]]"
if command -v gnuplot >/dev/null; then
    for f in time bytes breakdown active acceptance; do
        check "plot $f" "[[ -s '$tmp/t_$f.png' ]] && [[ \$(head -c 4 '$tmp/t_$f.png' | od -An -c | tr -d ' ') == '211PNG' ]]"
    done
fi

# bad input
mkdir "$tmp/empty"
node "$root/jobs/lib/sweep_summary.js" "$tmp/empty" "$tmp/x" > "$tmp/e1" 2>&1; rc=$?
check "summary of an empty directory: exit 1 with a reason" "[[ $rc == 1 ]] && grep -q 'no run files' '$tmp/e1'"
echo '{"ranks": [' > "$tmp/empty/greedy_spec0_tol0_r3_d5_l0.json"
node "$root/jobs/lib/sweep_summary.js" "$tmp/empty" "$tmp/x" > "$tmp/e2" 2>&1; rc=$?
check "summary of a truncated run file names it" "[[ $rc == 1 ]] && grep -q 'greedy_spec0_tol0_r3_d5_l0.json: not a meshinfer' '$tmp/e2' && [[ ! -e '$tmp/x.csv' ]]"
echo 'null' > "$tmp/empty/greedy_spec0_tol0_r3_d5_l0.json"
node "$root/jobs/lib/sweep_summary.js" "$tmp/empty" "$tmp/x" > "$tmp/e2" 2>&1; rc=$?
check "summary of a JSON null run file: one error line" "[[ $rc == 1 && \$(wc -l < '$tmp/e2') == 1 ]] && grep -q 'not a JSON object' '$tmp/e2'"
node -e 'const j = require(process.argv[1]); delete j.tpot_ms; console.log(JSON.stringify(j))' \
    "$tmp/t/runs/greedy_spec0_tol0_r3_dnet_lnet.json" > "$tmp/empty/greedy_spec0_tol0_r3_d5_l0.json"
node "$root/jobs/lib/sweep_summary.js" "$tmp/empty" "$tmp/x" > "$tmp/e2" 2>&1; rc=$?
check "summary of a run without tpot_ms names the field" "[[ $rc == 1 ]] && grep -q \"'tpot_ms' missing\" '$tmp/e2'"
cp "$tmp/t/runs/greedy_spec0_tol0_r3_dnet_lnet.json" "$tmp/empty/greedy_spec0_tol0_r3_d5_l0.json"
node "$root/jobs/lib/sweep_summary.js" "$tmp/empty" "$tmp/no/such/dir/x" > "$tmp/e2" 2>&1; rc=$?
check "summary into a missing directory: one error line" "[[ $rc == 1 && \$(wc -l < '$tmp/e2') == 1 ]] && grep -q 'does not exist' '$tmp/e2'"
mv "$tmp/empty/greedy_spec0_tol0_r3_d5_l0.json" "$tmp/empty/greedy_spec0_tol0_r9_d5_l0.json"
node "$root/jobs/lib/sweep_summary.js" "$tmp/empty" "$tmp/x" > "$tmp/e2" 2>&1; rc=$?
check "summary: file name and run disagree on ranks" "[[ $rc == 1 ]] && grep -q 'says 9 ranks but the run had 3' '$tmp/e2'"
SLURM_NTASKS=0 MODEL="$model" bash "$root/jobs/testbed/sweep.slurm" > "$tmp/e6" 2>&1; rc=$?
check "sweep.slurm rejects SLURM_NTASKS=0" "[[ $rc == 2 ]] && grep -q 'SLURM_NTASKS' '$tmp/e6'"
bash "$root/jobs/testbed/sweep.sh" --planners GREEDY > "$tmp/e7" 2>&1; rc=$?
check "sweep.sh rejects an unknown planner" "[[ $rc == 2 ]] && grep -q \"unknown planner 'GREEDY'\" '$tmp/e7'"
bash "$root/jobs/testbed/sweep.sh" --name 'a/b' > "$tmp/e3" 2>&1; rc=$?
check "sweep.sh rejects a --name with a slash" "[[ $rc == 2 ]] && grep -q -- '--name' '$tmp/e3'"
bash "$root/jobs/testbed/sweep.sh" --model "$tmp/none.h5" > "$tmp/e4" 2>&1; rc=$?
check "sweep.sh names a missing model" "[[ $rc == 2 ]] && grep -q 'none.h5' '$tmp/e4'"
MODEL="$tmp/none.h5" bash "$root/jobs/testbed/sweep.slurm" > "$tmp/e5" 2>&1; rc=$?
check "sweep.slurm names a missing model" "[[ $rc == 2 ]] && grep -q 'none.h5' '$tmp/e5'"
YIELD_WHEN_IDLE=yes MODEL="$model" bash "$root/jobs/testbed/sweep.slurm" > "$tmp/e8" 2>&1; rc=$?
check "sweep.slurm rejects YIELD_WHEN_IDLE=yes" "[[ $rc == 2 ]] && grep -q 'YIELD_WHEN_IDLE' '$tmp/e8'"
bash "$root/jobs/testbed/sweep.slurm" --help > "$tmp/h" 2>&1; rc=$?
check "sweep.slurm --help prints its header, not the #SBATCH lines" \
    "[[ $rc == 0 ]] && grep -q '^usage: sbatch' '$tmp/h' && grep -q YIELD_WHEN_IDLE '$tmp/h' && ! grep -q SBATCH '$tmp/h'"
exit $fail
