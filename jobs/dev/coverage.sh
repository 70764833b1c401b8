#!/usr/bin/env bash
# Line coverage of src/ by the test suite (gcc --coverage, gcovr): builds a
# separate tree with --coverage -O1, runs the ctest suite in it (ctest -j2;
# without the tests that build and run trees of their own: sanitize,
# fuzz_short and the aarch64 kernels under qemu), then reports with gcovr:
# total and per-file line coverage of src/ on stdout, coverage.csv,
# coverage.json (gcovr's JSON summary) and an HTML report (coverage/index.html)
# in the build tree, and a table per command (each src/cli/cmd_*.c). Exits 1
# when a command file is below --min-command, 2 on bad input; a test that
# fails in this tree is listed as a warning (jobs/run_tests.sh is the verdict).
# Counters are reset before the run, so the numbers are this run's; MPI ranks
# merge into the same .gcda files under libgcov's file locks.
#
# usage: jobs/dev/coverage.sh [--build-dir DIR] [--min-command PCT] [--report-only]
#   --build-dir DIR    the coverage tree (default build-coverage)
#   --min-command PCT  lowest line coverage for each cmd_*.c (default 70)
#   --report-only      report the tree's counters as they are (no build, no tests)
# Installs gcovr with apt-get when missing; the rest of what the build needs
# comes from jobs/dev/build.sh.
set -uo pipefail
. "$(dirname "$0")/../lib/common.sh"
fail_status=2
dir="$root/build-coverage" min=70 report_only=0
while (($#)); do
    case "$1" in
        --build-dir) need_value "$@"; dir=$2; shift 2 ;;
        --min-command) need_value "$@"; opt_pct "$1" "$2"; min=$2; shift 2 ;;
        --report-only) report_only=1; shift ;;
        *) bad_option "$1" ;;
    esac
done
[[ "$dir" == /* ]] || dir="$PWD/$dir"
command -v gcc > /dev/null || fail "gcc is not installed (jobs/dev/build.sh)"
if ! command -v gcovr > /dev/null; then
    echo "coverage: installing gcovr" >&2
    sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
    { DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcovr > /dev/null 2>&1 ||
      { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcovr > /dev/null; }; } ||
        { fail_status=1; fail "could not install gcovr (apt-get install gcovr)"; }
fi
start=$SECONDS fail=0
if ((!report_only)); then
    flags="--coverage -O1"
    echo "coverage: building $dir with $flags" >&2
    mkdir -p "$dir"
    CC=gcc cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="$flags" \
          -DCMAKE_EXE_LINKER_FLAGS=--coverage > "$dir/build.log" 2>&1 &&
        cmake --build "$dir" -j2 >> "$dir/build.log" 2>&1 ||
        { fail_status=1; fail "build failed (see $dir/build.log; jobs/dev/build.sh installs what it needs)"; }
    find "$dir" -name '*.gcda' -delete
    echo "coverage: running the test suite in $dir (log: $dir/ctest.log)" >&2
    # A failing test is reported, not fatal: the normal build's suite (jobs/run_tests.sh) is the test
    # verdict, and here instrumented code on shared cores can miss a timing bound or a timeout. What
    # a failed test ran is still counted (a process killed at a timeout writes no counters).
    if ! (cd "$dir" && ctest -j2 --output-on-failure -E '^(sanitize|fuzz_short|unit_kernels_aarch64_qemu)$' \
              > "$dir/ctest.log" 2>&1); then
        echo "coverage: warning: tests failed in the coverage tree (see $dir/ctest.log):"
        grep -E '^[[:space:]]+[0-9]+ - .*\(' "$dir/ctest.log" | sed 's/^[[:space:]]*/    /'
    fi
    grep -E 'tests passed|Total Test time' "$dir/ctest.log" | sed 's/^/coverage: /' >&2
fi
[[ -n "$(find "$dir" -name '*.gcda' -print -quit 2>/dev/null)" ]] ||
    { fail_status=1; fail "no coverage counters (*.gcda) in $dir"; }
echo "coverage: gcovr over src/" >&2
mkdir -p "$dir/coverage"
(cd "$dir" && gcovr -r "$root" --filter "$root/src/" -j 2 --txt - \
      --csv "$dir/coverage.csv" --json-summary-pretty --json-summary "$dir/coverage.json" \
      --html-details "$dir/coverage/index.html" --html-title "meshinfer: line coverage of src/" "$dir") \
    > "$dir/coverage.txt" 2> "$dir/gcovr.log" ||
    { fail_status=1; fail "gcovr failed (see $dir/gcovr.log)"; }
grep -v -E '^-+$|^ *GCC Code Coverage Report' "$dir/coverage.txt" | sed '/^Directory:/d'
# per command: every src/cli/cmd_*.c, from the CSV (filename,line_total,line_covered,line_percent,...)
echo
echo "per command (src/cli/cmd_*.c; subcommands in main.c), minimum $min%:"
awk -F, -v min="$min" '
    $1 ~ /^src\/cli\/cmd_[a-z_]+\.c$/ {
        n++; pct = ($2 > 0) ? 100 * $3 / $2 : 0; low = (pct < min)
        printf "  %-26s %5d of %5d lines  %5.1f%%%s\n", $1, $3, $2, pct, low ? "  BELOW" : ""
        bad += low
    }
    END { if (n == 0) { print "  no cmd_*.c in the report"; exit 3 } exit (bad ? 1 : 0) }' "$dir/coverage.csv"
case $? in
    0) echo "ok: every command file at or above $min% of its lines" ;;
    1) echo "FAIL: a command file is below $min% of its lines"; fail=1 ;;
    *) echo "FAIL: no command file in $dir/coverage.csv"; fail=1 ;;
esac
echo "coverage: reports in $dir: coverage.txt coverage.csv coverage.json coverage/index.html ($((SECONDS - start)) s)" >&2
exit $fail
