#!/usr/bin/env bash
# CATS's time-series model (docs/patchtst.md) in the engine.
#   - somegather at 2, 4, 8 and 16 ranks and layer-wise at 2 and 3 give the
#     one-rank forecasts bit for bit (same numbers, same order of additions);
#   - the engine equals PyTorch's evaluation of the same model file
#     (train/patchtst.py eval; max abs difference under 1e-4) at D = 1, 2, 4,
#     8, 16, with tp at 2 and 4 (its reduction adds in another order), with
#     pruning masks carried by the model (communication-aware and
#     magnitude), and with message loss in each of the three modes decided by
#     the same seed; skipped (not failed) only where Debian's python3-torch is
#     missing, which jobs/dev/build.sh installs;
#   - message loss changes the forecast, the same seed reproduces it;
#   - bad input: a series with a missing value, too few rows, a column count
#     the model was not trained on, --at outside the file, a language model
#     given to forecast and a time-series model given to generate: one error
#     line, non-zero exit, on one rank and on four.
# usage: forecast_check.sh MESHINFER
set -uo pipefail
bin=$1
root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3 # Debian's: python3-torch and python3-h5py are its packages
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
mpi() { local n=$1; shift; mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
        --mca btl self,vader -np "$n" "$bin" "$@"; }

# a series of 1000 rows and 3 channels: two periodic ones with a trend and a sawtooth (deterministic)
awk 'BEGIN { print "time,a,b,c"; for (i = 0; i < 1000; i++)
      printf "%d,%.5f,%.5f,%.5f\n", i, sin(i / 10) + 0.001 * i, 3 * cos(i / 7) + 5, (i % 24) / 24 }' > "$tmp/s.csv"
"$bin" synth --shape patchtst --out "$tmp/pt.h5" > /dev/null || { echo "FAIL: synth"; exit 1; }
at=896

# one rank, then every scheme and rank count: bit-identical
"$bin" forecast -m "$tmp/pt.h5" --series "$tmp/s.csv" --at $at --out "$tmp/f1.csv" > /dev/null 2>&1 || bad "one-rank forecast"
[[ $(wc -l < "$tmp/f1.csv") == 25 ]] && ok "one rank: 24 forecast rows" || bad "one rank: $(wc -l < "$tmp/f1.csv") lines"
for n in 2 4 8 16; do
    mpi $n forecast -m "$tmp/pt.h5" --series "$tmp/s.csv" --at $at --out "$tmp/f.csv" > /dev/null 2>&1
    cmp -s "$tmp/f1.csv" "$tmp/f.csv" && ok "somegather on $n ranks: the one-rank forecasts bit for bit" ||
        bad "somegather on $n ranks differs from one rank"
done
for n in 2 3; do
    mpi $n forecast -m "$tmp/pt.h5" --series "$tmp/s.csv" --at $at --planner layerwise --out "$tmp/f.csv" > /dev/null 2>&1
    cmp -s "$tmp/f1.csv" "$tmp/f.csv" && ok "layerwise on $n ranks: bit for bit" || bad "layerwise on $n ranks differs"
done

# every window of the test rows, as JSON and CSV: the windows, and the errors the file's rows give
echo '{"train": [0, 700], "val": [700, 800], "test": [800, 1000]}' > "$tmp/split.json"
"$bin" forecast -m "$tmp/pt.h5" --series "$tmp/s.csv" --split "$tmp/split.json" --stride 12 --json \
    --out "$tmp/all.csv" > "$tmp/all.json" 2> /dev/null || bad "--split run"
node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
  const ok = j.windows === 15 && j.channels === 3 && j.horizon === 24 && isFinite(j.mse_standardised) &&
             j.mse_standardised > 0 && j.per_channel.length === 3 && j.per_channel[2].name === "c";
  process.exit(ok ? 0 : 1)' "$tmp/all.json" && ok "--split: 15 windows (rows 800..968 every 12), 3 channels, finite errors" ||
    bad "--split JSON: $(head -c 300 "$tmp/all.json")"
[[ $(wc -l < "$tmp/all.csv") == $((15 * 24 + 1)) ]] && [[ $(sed -n 2p "$tmp/all.csv" | cut -d, -f1,2) == 800,0 ]] &&
    ok "--split --out: 360 forecast rows, the first at row 800" || bad "--split --out: $(wc -l < "$tmp/all.csv") lines"
# the window at row 896 of --split equals --at 896's
awk -F, '$1 == 896' "$tmp/all.csv" > "$tmp/w896"
tail -n +2 "$tmp/f1.csv" > "$tmp/f1body"
cmp -s "$tmp/w896" "$tmp/f1body" && ok "--split's window at 896 = --at 896" || bad "--split and --at disagree at 896"

# message loss: changes the forecast; the same seed gives the same forecast
mpi 4 forecast -m "$tmp/pt.h5" --series "$tmp/s.csv" --at $at --loss 0.2 --loss-seed 3 --out "$tmp/l1.csv" > /dev/null 2>&1
mpi 4 forecast -m "$tmp/pt.h5" --series "$tmp/s.csv" --at $at --loss 0.2 --loss-seed 3 --out "$tmp/l2.csv" > /dev/null 2>&1
if cmp -s "$tmp/l1.csv" "$tmp/l2.csv" && ! cmp -s "$tmp/l1.csv" "$tmp/f1.csv"; then
    ok "loss 0.2: a different forecast, the same for the same seed"
else
    bad "loss 0.2: not reproducible, or no effect"
fi

# against PyTorch on the same model file
maxdiff() { # PYTORCH.csv ENGINE.csv -> the largest absolute difference, or "rows" when they do not align
    awk -F, 'NR == FNR { if (FNR > 1) for (j = 4; j <= NF; j++) p[FNR, j - 1] = $j; rows = FNR; next }
             FNR > 1 { n++; for (j = 3; j <= NF; j++) { d = p[FNR, j] - $j; if (d < 0) d = -d; if (d > m) m = d } }
             END { if (n != rows - 1 || n == 0) print "rows"; else printf "%.3g\n", m }' "$1" "$2"
}
versus() { # NAME D MODEL PYTORCH-EVAL-OPTIONS -- ENGINE-OPTIONS
    local name=$1 d=$2 model=$3; shift 3
    local popts=() eopts=()
    while (($#)) && [[ $1 != -- ]]; do popts+=("$1"); shift; done
    shift
    eopts=("$@")
    "$py" "$root/train/patchtst.py" eval --model "$model" --series "$tmp/s3.csv" --split "$tmp/split.json" --window 0 \
        --devices "$d" "${popts[@]}" --out "$tmp/py.csv" > /dev/null 2>&1 || { bad "$name: PyTorch eval failed"; return; }
    local row
    row=$(awk -F, 'NR == 2 {print $2}' "$tmp/py.csv")
    mpi "$d" forecast -m "$model" --series "$tmp/s3.csv" --at "$row" "${eopts[@]}" --out "$tmp/e.csv" > /dev/null 2>&1 ||
        { bad "$name: engine failed"; return; }
    local m
    m=$(maxdiff "$tmp/py.csv" "$tmp/e.csv")
    if [[ $m != rows ]] && awk -v m="$m" 'BEGIN { exit !(m < 1e-4) }'; then
        ok "$name: engine = PyTorch (max abs difference $m)"
    else
        bad "$name: engine and PyTorch differ (max abs difference $m)"
    fi
}
if "$py" -c 'import torch, h5py' 2> /dev/null; then
    cut -d, -f2- "$tmp/s.csv" > "$tmp/s3.csv" # a series without the time column: the row numbers of both sides are data rows
    for d in 1 2 4 8 16; do versus "D=$d" $d "$tmp/pt.h5" --; done
    # tp reduces partial sums in another order than one device: equal within the tolerance, not bit for bit
    for d in 2 4; do versus "tp D=$d" $d "$tmp/pt.h5" -- --planner tp; done
    "$py" "$root/train/patchtst.py" synth --out "$tmp/aware.h5" --seed 3 --n-channels 3 --prune 0.5 --devices 4 > /dev/null 2>&1
    "$py" "$root/train/patchtst.py" synth --out "$tmp/magn.h5" --seed 4 --n-channels 3 --prune 0.5 --prune-mode magnitude \
        --devices 8 > /dev/null 2>&1
    versus "masks (aware, r = 0.5), D=4" 4 "$tmp/aware.h5" --
    versus "masks (magnitude, r = 0.5), D=8" 8 "$tmp/magn.h5" --
    for mode in link receiver sender; do
        versus "loss 0.2 $mode, D=4" 4 "$tmp/pt.h5" --loss 0.2 --loss-mode $mode --loss-seed 5 -- \
            --loss 0.2 --loss-mode $mode --loss-seed 5
    done
    versus "masks and loss 0.1 link, D=16" 16 "$tmp/aware.h5" --loss 0.1 --loss-mode link --loss-seed 9 -- \
        --loss 0.1 --loss-mode link --loss-seed 9
else
    echo "skipped: PyTorch comparison ($py has no torch/h5py: apt-get install python3-torch python3-h5py)"
fi

# bad input: one error line, non-zero exit, on one rank and on four
head -50 "$tmp/s.csv" > "$tmp/short.csv"
sed '300s/,[^,]*$/,/' "$tmp/s.csv" > "$tmp/missing.csv"
cut -d, -f1-3 "$tmp/s.csv" > "$tmp/cols.csv"
refuse() { # NAME EXPECTED-TEXT ARGS...
    local name=$1 says=$2; shift 2
    for n in 1 4; do
        local out rc
        if ((n == 1)); then out=$("$bin" "$@" 2>&1 > /dev/null); rc=$?; else out=$(mpi 4 "$@" 2>&1 > /dev/null); rc=$?; fi
        local lines
        lines=$(grep -c 'error' <<< "$out")
        if ((rc != 0)) && [[ $out == *"$says"* ]] && ((lines == 1)); then
            ok "$name on $n rank(s): exit $rc, one line"
        else
            bad "$name on $n rank(s): exit $rc, $lines error lines: $out"
        fi
    done
}
refuse "missing value" "line 300, column 'c': missing" forecast -m "$tmp/pt.h5" --series "$tmp/missing.csv"
refuse "too few rows" "has 49 rows: a forecast needs lookback 96 + horizon 24" forecast -m "$tmp/pt.h5" --series "$tmp/short.csv"
refuse "column count" "has 2 columns, but the model was trained on 3 channels" forecast -m "$tmp/pt.h5" --series "$tmp/cols.csv"
echo '{"train": [0, 700], "test": [600, 1000]}' > "$tmp/overlap.json"
refuse "test rows overlapping train rows" "the test rows [600, 1000) overlap the train rows [0, 700)" \
    forecast -m "$tmp/pt.h5" --series "$tmp/s.csv" --split "$tmp/overlap.json"
awk -F, 'BEGIN {OFS = ","} NR > 1 {$2 = 5} {print}' "$tmp/s.csv" > "$tmp/flat.csv"
refuse "a constant column" "is constant over the rows [0, 1000)" forecast -m "$tmp/pt.h5" --series "$tmp/flat.csv"
refuse "--at outside" "--at 990" forecast -m "$tmp/pt.h5" --series "$tmp/s.csv" --at 990
refuse "greedy refused" "runs with --planner somegather, layerwise or tp" forecast -m "$tmp/pt.h5" --series "$tmp/s.csv" --planner greedy
refuse "generate on a time-series model" "run it with meshinfer forecast" generate -m "$tmp/pt.h5" --prompt hi -n 2
[[ -z $(ls "$tmp" | grep partial) ]] && ok "nothing partial left" || bad "partial files left: $(ls "$tmp")"

echo "forecast_check: $pass passed, $fail failed"
((fail == 0))
