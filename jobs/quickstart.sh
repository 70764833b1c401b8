#!/usr/bin/env bash
# First command of the README: install what is missing, build, fetch and
# convert the real stories15M model, and generate text with it.
#
# usage: jobs/quickstart.sh [PROMPT]
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"
    exit 0
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/jobs/dev/build.sh"
model="$("$root/jobs/dev/fetch_model.sh")"
prompt="${1:-Once upon a time, there was a little girl named Lily}"
echo "quickstart: meshinfer generate -m $model -p \"$prompt\" -n 200" >&2
"$root/build/meshinfer" generate -m "$model" -p "$prompt" -n 200
