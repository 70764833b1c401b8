#!/usr/bin/env bash
# First command of the README: install what is missing, build, fetch and
# convert the real stories15M model, and generate text with it.
#
# usage: jobs/quickstart.sh [PROMPT]
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
"$root/jobs/dev/build.sh"
model="$("$root/jobs/dev/fetch_model.sh")"
prompt="${1:-Once upon a time, there was a little girl named Lily}"
echo "quickstart: meshinfer generate -m $model -p \"$prompt\" -n 200" >&2
"$root/build/meshinfer" generate -m "$model" -p "$prompt" -n 200
