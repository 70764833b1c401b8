#!/usr/bin/env bash
# jobs/dev/fuzz_finding.sh on recorded findings (tests/data/fuzz_findings):
# HARNESS-WHAT.ok.log must be judged libhdf5's own (exit 0, naming libhdf5 and
# meshinfer's calling frame), HARNESS-WHAT.fail.log a finding that fails the run.
# The first case is the report a CI run printed, with glibc's debug symbols.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
judge="$root/jobs/dev/fuzz_finding.sh" fail=0 n=0
for log in "$root"/tests/data/fuzz_findings/*.log; do
    name=$(basename "$log" .log) harness=${name%%-*} want=${name##*.}
    out=$("$judge" "$harness" "$log"); status=$?
    n=$((n + 1))
    if [[ $want == ok ]]; then
        [[ $status == 0 && $out == "libhdf5 "*libhdf5_serial*" called from "*/src/model/model_file.c:* ]] ||
            { echo "FAIL: $name: want libhdf5's own, got status $status: $out"; fail=1; }
    else
        [[ $status == 1 && $out == "finding "* ]] ||
            { echo "FAIL: $name: want a finding, got status $status: $out"; fail=1; }
    fi
done
# a missing log is a usage error, not a verdict
"$judge" hdf5 /nonexistent.log > /dev/null 2>&1; s=$?
[[ $s == 2 ]] || { echo "FAIL: missing log: status $s, want 2"; fail=1; }
((n >= 7)) || { echo "FAIL: only $n recorded findings"; fail=1; }
((fail)) || echo "ok: $n recorded findings judged as expected"
exit $fail
