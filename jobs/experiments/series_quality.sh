#!/usr/bin/env bash
# CATS Fig. 7 and Fig. 8 for its own workload (docs/patchtst.md), on the
# real series of jobs/dev/fetch_series.sh: models trained with PyTorch
# (train/patchtst.py, Debian's python3-torch) for D devices, evaluated by the
# engine (`mpirun -np D meshinfer forecast --split`: every test window, the
# error standardised by the train rows), several seeds, mean and spread.
#   pruning: forecast error against the communication saved (bytes the
#     engine sent, against r = 0), somegather's communication-aware pruning
#     against normal (magnitude) pruning, r = 0 .. 0.9 (staged, retrained);
#   loss: forecast error against message loss 0, 2.5, 5, 10 % for models
#     trained without and with message dropout, per loss mode (link,
#     receiver, sender), several loss seeds per model.
# Writes OUT/DATASET/{pruning,loss}.csv, OUT/quality.md and one PNG per
# dataset and figure (OUT/DATASET_pruning.png, OUT/DATASET_loss.png), and keeps
# the models in OUT/models. A model already trained (same file name) is reused.
#
# usage: jobs/experiments/series_quality.sh [--datasets "sensor_mote3 seattle_hourly sp500"] [--devices D]
#            [--seeds N] [--epochs E] [--stage-epochs E] [--max-samples N] [--ratios "0.5 0.9"]
#            [--dropout P] [--only pruning|loss] [--out DIR]
#   defaults: D 4, 2 seeds, 3 epochs (then 1 per pruning stage, 2 stages; models without pruning
#   train 5 epochs, as many as a pruned one), 3000 samples per epoch,
#   dropout 0.1 (the rate models are trained at; CATS trains at the loss it deploys at)
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
out="$root/results/series" datasets="sensor_mote3 seattle_hourly sp500" D=4 seeds=2 epochs=3 stage_epochs=1
max_samples=3000 ratios="0.5 0.9" dropout=0.1 only=""
while (($#)); do
    need_value "$@"
    case "$1" in
        --datasets) datasets=$2 ;;
        --devices) opt_int "$1" "$2" 1 256; D=$2 ;;
        --seeds) opt_int "$1" "$2" 1 1000; seeds=$2 ;;
        --epochs) opt_int "$1" "$2" 1 100000; epochs=$2 ;;
        --stage-epochs) opt_int "$1" "$2" 1 100000; stage_epochs=$2 ;;
        --max-samples) opt_int "$1" "$2" 1 100000000; max_samples=$2 ;;
        --ratios) opt_nums "$1" "$2" 0 0.999999; ratios=${2//,/ } ;;
        --dropout) [[ $2 =~ ^0?[.][0-9]+$ ]] && opt_num "$1" "$2" 0.000001 0.999999 ||
                       arg_fail "--dropout '$2' is not a probability in (0, 1)"; dropout=$2 ;;
        --only) [[ $2 == pruning || $2 == loss ]] || arg_fail "--only takes pruning or loss"; only=$2 ;;
        --out) out=$2 ;;
        *) bad_option "$1" ;;
    esac
    shift 2
done
py=/usr/bin/python3
"$py" -c 'import torch, h5py' 2> /dev/null || fail "$py lacks torch or h5py (apt-get install python3-torch python3-h5py)"
meshinfer_bin
command -v gnuplot > /dev/null || fail "gnuplot is not installed (apt-get install gnuplot-nox)"
cache="${MESHINFER_CACHE:-$root/models/cache}/series"
for ds in $datasets; do
    [[ -f "$cache/$ds.csv" ]] || MESHINFER_CACHE="$(dirname "$cache")" "$root/jobs/dev/fetch_series.sh" > /dev/null ||
        fail "cannot fetch the series"
    [[ -f "$cache/$ds.csv" ]] || fail "no dataset '$ds' (jobs/dev/fetch_series.sh fetches: $(ls "$cache" | sed -n 's/[.]csv$//p' | tr '\n' ' '))"
done
mkdir -p "$out/models"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mpi() { local n=$1; shift; mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
        -np "$n" "$bin" "$@"; }
t_start=$(date +%s)

train() { # MODEL DATASET SEED TRAIN-OPTIONS...: trains unless the model is there
    local m=$1 ds=$2 seed=$3; shift 3
    [[ -f $m ]] && return
    local t0=$(date +%s) ep=$epochs
    # a model trained without pruning gets the epochs a pruned one spends in its stages too, so
    # that pruning is not credited with the extra training
    [[ " $* " == *" --prune "* ]] || ep=$((epochs + 2 * stage_epochs))
    "$py" "$root/train/patchtst.py" train --series "$cache/$ds.csv" --split "$cache/$ds.split.json" --out "$m" \
        --devices "$D" --epochs "$ep" --stage-epochs "$stage_epochs" --max-samples "$max_samples" \
        --eval-stride 24 --seed "$seed" --json "${m%.h5}.json" "$@" 2> "$tmp/train.log" ||
        fail "training $m failed: $(tail -2 "$tmp/train.log")"
    say "  trained $(basename "$m") in $(($(date +%s) - t0)) s"
}
evaluate() { # DATASET MODEL ENGINE-OPTIONS... -> "mse bytes_sent"
    local ds=$1 m=$2; shift 2
    mpi "$D" forecast -m "$m" --series "$cache/$ds.csv" --split "$cache/$ds.split.json" --json "$@" \
        > "$tmp/e.json" 2> "$tmp/e.err" || fail "forecast with $m: $(grep -m1 error "$tmp/e.err")"
    node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
      console.log(j.mse_standardised, j.ranks.reduce((a, r) => a + r.bytes_sent, 0) / j.windows / j.channels)' "$tmp/e.json"
}

for ds in $datasets; do
    mkdir -p "$out/$ds"
    if [[ $only != loss ]]; then
        say "$ds: pruning (D = $D, ratios 0 $ratios, aware and magnitude, $seeds seeds)"
        csv="$out/$ds/pruning.csv.partial"
        echo "dataset,mode,prune,seed,mse,bytes_per_forecast" > "$csv"
        for seed in $(seq 1 "$seeds"); do
            m="$out/models/${ds}_d${D}_s${seed}.h5"
            train "$m" "$ds" "$seed"
            read -r mse bytes <<< "$(evaluate "$ds" "$m")"
            echo "$ds,aware,0,$seed,$mse,$bytes" >> "$csv"
            echo "$ds,magnitude,0,$seed,$mse,$bytes" >> "$csv"
            for r in $ratios; do
                for mode in aware magnitude; do
                    m="$out/models/${ds}_d${D}_${mode}${r}_s${seed}.h5"
                    train "$m" "$ds" "$seed" --prune "$r" --prune-mode "$mode" --stages 2
                    read -r mse bytes <<< "$(evaluate "$ds" "$m")"
                    echo "$ds,$mode,$r,$seed,$mse,$bytes" >> "$csv"
                done
            done
        done
        mv "$csv" "$out/$ds/pruning.csv"
    fi
    if [[ $only != pruning ]]; then
        say "$ds: message loss (D = $D, trained without and with dropout $dropout per mode, $seeds seeds)"
        csv="$out/$ds/loss.csv.partial"
        echo "dataset,mode,trained_dropout,loss,seed,loss_seed,mse" > "$csv"
        for seed in $(seq 1 "$seeds"); do
            for mode in link receiver sender; do
                for p in 0 "$dropout"; do
                    if [[ $p == 0 ]]; then
                        m="$out/models/${ds}_d${D}_s${seed}.h5"
                        train "$m" "$ds" "$seed"
                    else
                        m="$out/models/${ds}_d${D}_drop${p}${mode}_s${seed}.h5"
                        train "$m" "$ds" "$seed" --dropout "$p" --loss-mode "$mode"
                    fi
                    for loss in 0 0.025 0.05 0.1; do
                        for ls in 1 2; do
                            [[ $loss == 0 && $ls == 2 ]] && continue
                            read -r mse _ <<< "$(evaluate "$ds" "$m" --loss "$loss" --loss-mode "$mode" --loss-seed "$ls")"
                            echo "$ds,$mode,$p,$loss,$seed,$ls,$mse" >> "$csv"
                            [[ $loss == 0 ]] && echo "$ds,$mode,$p,$loss,$seed,2,$mse" >> "$csv"
                        done
                    done
                done
            done
        done
        mv "$csv" "$out/$ds/loss.csv"
    fi
done

# ---- summaries and figures: mean and spread (min..max) over seeds
{
    echo "# CATS Fig. 7 and 8 for the time-series model (jobs/experiments/series_quality.sh)"
    echo
    echo "D = $D devices, $seeds seeds, $epochs epochs + $stage_epochs per pruning stage (unpruned models: as many in all),"
    echo "$max_samples samples per epoch;"
    echo "test-window MSE of the engine's forecasts, standardised by the train rows; mean (min..max) over seeds."
} > "$tmp/quality.md"
for ds in $datasets; do
    if [[ -f "$out/$ds/pruning.csv" ]]; then
        node - "$out/$ds/pruning.csv" "$tmp/p" >> "$tmp/quality.md" <<'JS'
const fs = require("fs");
const rows = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").slice(1).map(l => l.split(","));
const ds = rows[0][0];
const base = {}; for (const r of rows) if (r[2] === "0") (base[r[3]] = base[r[3]] || +r[5]);
let o = `\n## ${ds}: error against communication saved\n\n| r | saved | aware MSE | magnitude MSE |\n|---|---|---|---|\n`;
const rs = [...new Set(rows.map(r => r[2]))].sort((a, b) => a - b);
for (const mode of ["aware", "magnitude"]) {
  let dat = "";
  for (const r of rs) {
    const sel = rows.filter(q => q[1] === mode && q[2] === r);
    const mse = sel.map(q => +q[4]), saved = sel.map(q => 1 - +q[5] / base[q[3]]);
    const mean = a => a.reduce((x, y) => x + y, 0) / a.length;
    dat += `${(100 * mean(saved)).toFixed(2)} ${mean(mse)} ${Math.min(...mse)} ${Math.max(...mse)}\n`;
  }
  fs.writeFileSync(`${process.argv[3]}_${mode}.dat`, dat);
}
for (const r of rs) {
  const cell = mode => { const m = rows.filter(q => q[1] === mode && q[2] === r).map(q => +q[4]);
    return `${(m.reduce((x, y) => x + y, 0) / m.length).toFixed(4)} (${Math.min(...m).toFixed(4)}..${Math.max(...m).toFixed(4)})`; };
  const saved = rows.filter(q => q[1] === "aware" && q[2] === r).map(q => 1 - +q[5] / base[q[3]]);
  o += `| ${r} | ${(100 * saved.reduce((x, y) => x + y, 0) / saved.length).toFixed(0)}% | ${cell("aware")} | ${cell("magnitude")} |\n`;
}
process.stdout.write(o);
JS
        plot_png "$tmp/${ds}_pruning.png" "700,450" ",10" <<GP
set title "$ds: forecast error against communication saved (D = $D)" noenhanced
set xlabel "communication saved (%)"
set ylabel "test MSE (standardised)"
set grid
set key top left
plot "$tmp/p_aware.dat" using 1:2:3:4 with yerrorlines lw 2 title "somegather (communication-aware)", \
     "$tmp/p_magnitude.dat" using 1:2:3:4 with yerrorlines lw 2 title "normal pruning (magnitude)"
GP
    fi
    if [[ -f "$out/$ds/loss.csv" ]]; then
        node - "$out/$ds/loss.csv" "$tmp/l" >> "$tmp/quality.md" <<'JS'
const fs = require("fs");
const rows = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").slice(1).map(l => l.split(","));
const ds = rows[0][0];
const mean = a => a.reduce((x, y) => x + y, 0) / a.length;
let o = `\n## ${ds}: error against message loss\n\n| mode | trained with | 0% | 2.5% | 5% | 10% | rise at 10% |\n|---|---|---|---|---|---|---|\n`;
for (const mode of ["link", "receiver", "sender"])
  for (const p of [...new Set(rows.map(r => r[2]))]) {
    let dat = "", cells = [];
    for (const loss of ["0", "0.025", "0.05", "0.1"]) {
      const m = rows.filter(q => q[1] === mode && q[2] === p && q[3] === loss).map(q => +q[6]);
      if (!m.length) continue;
      dat += `${100 * loss} ${mean(m)} ${Math.min(...m)} ${Math.max(...m)}\n`;
      cells.push(mean(m));
    }
    fs.writeFileSync(`${process.argv[3]}_${mode}_${p}.dat`, dat);
    o += `| ${mode} | ${p === "0" ? "no dropout" : "dropout " + p} | ${cells.map(c => c.toFixed(4)).join(" | ")} | ${(100 * (cells[3] / cells[0] - 1)).toFixed(1)}% |\n`;
  }
process.stdout.write(o);
JS
        p=$(awk -F, 'NR > 1 && $3 != 0 {print $3; exit}' "$out/$ds/loss.csv")
        plot_png "$tmp/${ds}_loss.png" "1200,400" ",10" <<GP
set multiplot layout 1,3 title "$ds: forecast error against message loss (D = $D; mean, min..max over seeds)" noenhanced
set grid
set xlabel "message loss (%)"
set ylabel "test MSE (standardised)"
set key top left
do for [mode in "link receiver sender"] {
    set title mode
    plot sprintf("$tmp/l_%s_0.dat", mode) using 1:2:3:4 with yerrorlines lw 2 title "trained without dropout", \
         sprintf("$tmp/l_%s_$p.dat", mode) using 1:2:3:4 with yerrorlines lw 2 title "trained with dropout $p"
}
unset multiplot
GP
    fi
done
# written whole in the scratch folder, then moved
mv "$tmp/quality.md" "$out/quality.md"
for f in "$tmp"/*_pruning.png "$tmp"/*_loss.png; do [[ -f $f ]] && mv "$f" "$out/"; done
say "wrote $out/quality.md and the figures in $out ($(($(date +%s) - t_start)) s)"
cat "$out/quality.md"
