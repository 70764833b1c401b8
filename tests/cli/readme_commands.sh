#!/usr/bin/env bash
# The README's two set-up commands exist and are executable, and .ci/run runs
# the README's test command with --coverage, whose report is jobs/dev/coverage.sh
# (guards against a README or CI script drifting).
# usage: readme_commands.sh REPO_ROOT
set -u
root=$1
pass=0 fail=0
chk() { if eval "$1"; then echo "ok: $2"; pass=$((pass+1)); else echo "FAIL: $2"; fail=$((fail+1)); fi; }
chk '[[ $(wc -l < "$root/README.md") -gt 100 ]]' "README.md has content"
chk 'grep -q "^jobs/quickstart.sh" "$root/README.md" && [[ -x "$root/jobs/quickstart.sh" ]]' "first command: jobs/quickstart.sh"
chk 'grep -q "^jobs/run_tests.sh" "$root/README.md" && [[ -x "$root/jobs/run_tests.sh" ]]' "second command: jobs/run_tests.sh"
chk 'grep -q "jobs/run_tests.sh" "$root/.ci/run"' ".ci/run runs jobs/run_tests.sh"
chk 'grep -q "^bash jobs/run_tests.sh --coverage" "$root/.ci/run" && grep -q "jobs/dev/coverage.sh --report-only" "$root/jobs/run_tests.sh" && [[ -x "$root/jobs/dev/coverage.sh" ]]' ".ci/run runs the suite with --coverage, which reports through jobs/dev/coverage.sh"
out=$(timeout 20 bash "$root/jobs/run_tests.sh" --bogus 2>&1); rc=$?
chk '[[ $rc -eq 2 && $(grep -c . <<< "$out") -eq 1 && "$out" == *"unknown option '"'"'--bogus'"'"'"* ]]' \
    "a mistyped option of the test command is one error line, not the whole suite (exit $rc: $out)"
echo "$pass passed, $fail failed"
((fail == 0))
