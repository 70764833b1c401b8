#!/usr/bin/env bash
# CATS Q1 (Fig. 4) for our model shapes: the memory and traffic model of
# somegather (r = 0, 0.5, 0.9) against hu2024edge, liu2025communication and
# bochem2025distributed, as tables, CSV and PNG figures (no model file, no MPI).
#
# usage: jobs/experiments/memory_model.sh [OUT_DIR] [extra `meshinfer plan --memory-model` options]
#   writes OUT_DIR/memory_model_<shape>.{txt,csv,png} for tinyllama-1.1b and
#   stories15M (OUT_DIR default results/memory_model)
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
out="${1:-$root/results/memory_model}"
shift || true
meshinfer_bin
out_dir "$out"
for shape in tinyllama-1.1b stories15M; do
    base="$out/memory_model_${shape%%-*}"
    "$bin" plan --memory-model --shape "$shape" --prune 0,0.5,0.9 --csv "$base.csv" --png "$base.png" "$@" \
        > "$base.txt"
    echo "memory_model: wrote $base.{txt,csv,png}" >&2
done
