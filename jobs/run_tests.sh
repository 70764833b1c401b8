#!/usr/bin/env bash
# Second command of the README: install what is missing, build, and run the
# whole test suite with ctest (the suite fetches the real model and the npm
# reference material itself on first use).
#
# usage: jobs/run_tests.sh [extra ctest arguments, e.g. -R unit_]
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"
    exit 0
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/jobs/dev/build.sh"
cd "$root/build"
ctest --output-on-failure "$@"
