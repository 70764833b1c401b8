#!/usr/bin/env bash
# AddressSanitizer and UndefinedBehaviorSanitizer run: builds a second tree
# with -fsanitize=address,undefined (any undefined behaviour is fatal), runs
# the unit tests in it, then distributed generations of the real model
# through every code path that moves data between ranks (head-level greedy
# with speculation, tp, somegather with pruning and loss, memory-triggered
# re-placement that moves KV heads, q4_0 weights with q8_0 messages) and
# checks that no sanitizer reported anything and that each gives the same
# tokens as the normal build. Then a soak under the sanitizers:
# generate --repeat N on 4 ranks with re-placement moving KV heads in
# every generation, each repeat checked against the first run's tokens
# (resident memory is reported, not judged: ASan's quarantine keeps freed
# memory; jobs/testbed/soak.sh judges it on the normal build). Leak checking is off:
# Open MPI keeps its allocations until exit by design.
#
# usage: jobs/dev/sanitize.sh [--build-dir DIR] [--soak N] [MODEL.h5]
#   --build-dir DIR   the sanitizer build tree (default build-sanitize)
#   --soak N          generations in the soak (default 20; 0 skips it)
#   MODEL.h5          default models/cache/stories15M.h5
# environment: MESHINFER_BIN  the normal build's binary (default build/meshinfer)
set -uo pipefail
. "$(dirname "$0")/../lib/common.sh"
fail_status=2
dir="$root/build-sanitize" soak=20
model="$root/models/cache/stories15M.h5"
while (($#)); do
    case "$1" in
        --build-dir) need_value "$@"; dir=$2; shift 2 ;;
        --soak) need_value "$@"; opt_int "$1" "$2" 0 1000000; soak=$2; shift 2 ;;
        -*) bad_option "$1" ;;
        *) model=$1; shift ;;
    esac
done
check_model "$model"
meshinfer_bin
ref=$bin
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
echo "sanitize: building $dir with $flags" >&2
mkdir -p "$dir"
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$flags" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > "$dir/build.log" 2>&1 &&
    cmake --build "$dir" -j2 >> "$dir/build.log" 2>&1 || { fail_status=1; fail "build failed (see $dir/build.log)"; }
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
fail=0 pass=0
echo "sanitize: unit tests" >&2
if (cd "$dir" && ctest -R '^unit_' -E aarch64 > "$dir/unit.log" 2>&1); then
    echo "ok: unit tests clean under ASan and UBSan"; pass=$((pass + 1))
else
    echo "FAIL: unit tests under sanitizers:"; grep -E "ERROR: AddressSanitizer|runtime error|Failed" "$dir/unit.log" | head -5
    fail=$((fail + 1))
fi
san="$dir/meshinfer" tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
q4="$tmp/q4.h5"
"$ref" quantize -m "$model" --dtype q4_0 --out "$q4" > /dev/null 2>&1 || { fail_status=1; fail "quantize failed"; }
mpi=(timeout 300 mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1
     -x ASAN_OPTIONS -x UBSAN_OPTIONS)
tokens() { node -e 'const s = require("fs").readFileSync(0, "utf8"); const i = s.indexOf("{");
                    try { console.log(JSON.parse(s.slice(i)).tokens.join(" ")); } catch (e) { console.log("no JSON"); }'; }
# one case: NAME RANKS MODEL ARGS...
one() {
    local name=$1 np=$2 m=$3; shift 3
    echo "sanitize: $name" >&2
    local want got
    want=$("${mpi[@]}" -np "$np" "$ref" generate -m "$m" --json "$@" 2>/dev/null | tokens)
    "${mpi[@]}" -np "$np" "$san" generate -m "$m" --json "$@" > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    got=$(tokens < "$tmp/out")
    if [[ $rc == 0 && -n "$want" && "$got" == "$want" ]] &&
       ! grep -qE "ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer" "$tmp/err" "$tmp/out"; then
        echo "ok: $name: clean, same tokens as the normal build"; pass=$((pass + 1))
    else
        echo "FAIL: $name: exit $rc, $(grep -m1 -E "AddressSanitizer|runtime error" "$tmp/err" "$tmp/out")"
        [[ "$got" == "$want" ]] || echo "    tokens differ: '$got' vs '$want'"
        fail=$((fail + 1))
    fi
}
one "one rank" 1 "$model" -n 24
# tolerance 0: every test runs and every rejection recomputes, yet the tokens are exact (with a
# loose tolerance which transitions speculate depends on round trips, so runs differ)
one "greedy head-level with speculation, 3 ranks" 3 "$model" -n 24 --planner greedy --speculate --tolerance 0
one "tp, 4 ranks" 4 "$model" -n 24 --planner tp
one "somegather, pruning and loss, 3 ranks" 3 "$model" -n 24 --planner somegather --prune 0.5,hidden=0.9 --loss 0.05
one "re-placement moving KV heads, 4 ranks" 4 "$model" -n 150 --ignore-eos \
    --cluster "$root/mpi_tests/cluster-tight.json" --kv-positions 32 --replan
# Voltron: hybrid's prefill placement, then a re-placement to its decode placement after the prompt
one "hybrid with its phases apart, 3 ranks" 3 "$model" -n 24 --cluster "$root/mpi_tests/cluster-hybrid3.json" \
    --planner hybrid --phase-plans both
one "q4_0 weights, q8_0 messages, somegather 2 ranks" 2 "$q4" -n 24 --planner somegather --wire-dtype q8_0
if ((soak > 0)); then
    echo "sanitize: soak of $soak generations" >&2
    # head-level greedy without speculation: with --speculate this cluster's placements for 32, 66
    # and 134 positions are alike, and nothing would move (speculation is the third case above)
    soak_args=(-n 80 --ignore-eos --planner greedy --cluster "$root/mpi_tests/cluster-tight.json" --kv-positions 32 --replan)
    want=$("${mpi[@]}" -np 4 "$ref" generate -m "$model" --json "${soak_args[@]}" 2>/dev/null | tokens)
    "${mpi[@]/300/7200}" -np 4 "$san" generate -m "$model" --json "${soak_args[@]}" --repeat "$soak" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    got=$(tokens < "$tmp/out")
    sk=$(node -e 'const s = require("fs").readFileSync(process.argv[1], "utf8"), d = JSON.parse(s.slice(s.indexOf("{"))), j = d.repeat;
      const g = j.rss_mb_after_last.map((x, r) => x - j.rss_mb_after_first_repeat[r]);
      console.log(`${j.same_tokens} of ${j.runs} repeats the first run'"'"'s tokens, ${d.replans_moved} re-placements moving shards, ` +
                  `RSS growth at most ${Math.max(...g).toFixed(3)} MB (ASan'"'"'s quarantine holds freed memory: not judged here)`,
                  j.same_tokens === j.runs && d.replans_moved >= 2 * (j.runs + 1) - 1 ? "good" : "bad")' \
         "$tmp/out" 2>&1)
    if [[ $rc == 0 && -n "$want" && "$got" == "$want" && $sk == *good ]] &&
       ! grep -qE "ERROR: AddressSanitizer|runtime error:" "$tmp/err" "$tmp/out"; then
        echo "ok: soak of $soak generations on 4 ranks with re-placement moving KV heads in each: clean; ${sk% good}"; pass=$((pass + 1))
    else
        echo "FAIL: soak: exit $rc, ${sk% bad} $(grep -m1 -E "AddressSanitizer|runtime error" "$tmp/err" "$tmp/out")"
        [[ "$got" == "$want" ]] || echo "    tokens differ from the normal build's"
        fail=$((fail + 1))
    fi
fi
echo "$pass passed, $fail failed"
((fail == 0))
