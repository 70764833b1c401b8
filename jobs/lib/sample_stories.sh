#!/usr/bin/env bash
# In-distribution text for a stories model: one story of 250 tokens per seed,
# sampled by the model itself (temperature 1, no top-k, top-p 0.95), written to FILE
# whole or not at all. Kept if FILE exists already.
#
# usage: jobs/lib/sample_stories.sh MESHINFER MODEL FILE FIRST_SEED LAST_SEED
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" || $# -ne 5 ]]; then
    awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"
    [[ $# -eq 5 || "${1:-}" == "-h" || "${1:-}" == "--help" ]] && exit 0 || exit 1
fi
bin=$1 model=$2 file=$3
[[ -s "$file" ]] && exit 0
echo "sampling $(basename "$file") (seeds $4-$5)..." >&2
for s in $(seq "$4" "$5"); do
    "$bin" generate -m "$model" -t 1 --top-k 0 --top-p 0.95 -s "$s" -n 250 2>"$file.err" ||
        { echo "sample_stories: error: sampling with seed $s: $(tail -1 "$file.err")" >&2; rm -f "$file.partial" "$file.err"; exit 1; }
    echo
done > "$file.partial"
rm -f "$file.err"
mv "$file.partial" "$file"
