#!/usr/bin/env bash
# The job scripts refuse a bad option value before any work: each option that
# takes a value, given without it, negative, out of its range and of the wrong
# type (a word for a number, a directory or a missing path for a file), must
# end its script with exit 2 and exactly one line "NAME: error: ..." that
# names the option -- never bash's own words ("unbound variable", "syntax
# error", "integer expression expected", ...). Only the option parsing runs:
# MESHINFER_BIN names no binary, so a script that got past its checks could
# neither build nor start a testbed or an MPI job (it would fail on that, and
# the line would not name the option). Also: a hosts cluster file with two
# devices of one name is refused before any host is made.
# usage: job_options.sh REPO_ROOT
set -u
root=$(cd "$1" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export MESHINFER_BIN="$tmp/no-meshinfer"
cd "$tmp" || exit 1 # (a script that took an option for a folder name makes it here)
pass=0 fail=0
printf '{"devices": [{"name": "a", "mem_mb": 500}, {"name": "b", "mem_mb": 500}]}\n' > "$tmp/cluster.json"
printf 'localhost slots=2\n' > "$tmp/hosts"
echo 'not a model' > "$tmp/model.h5"

# expect SCRIPT OPTION WHAT ARGS...: exit 2, one error line of the script naming OPTION
expect() {
    local script=$1 opt=$2 what=$3; shift 3
    local name rc
    name=$(basename "$script" .sh)
    timeout 30 "$root/$script" "$@" > "$tmp/out" 2> "$tmp/err" < /dev/null
    rc=$?
    if ((rc != 2)) || [[ $(grep -c . "$tmp/err") -ne 1 ]] || ! grep -q "^$name: error: " "$tmp/err" ||
       ! grep -qF -- "$opt" "$tmp/err" || grep -Eq 'unbound variable|syntax error|integer expression|command not found|value too great|line [0-9]+:' "$tmp/err"; then
        echo "FAIL: $script $* ($what): exit $rc, want 2 and one '$name: error:' line naming $opt; got:"
        sed 's/^/    /' "$tmp/err" | head -5
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
}

# check SCRIPT "ARGS BEFORE" "ARGS AFTER" OPTION:KIND[:OUT_OF_RANGE] ...
#   KIND int|num: a number out of range (OUT_OF_RANGE), -3, a word, and for int 1.5;
#   file: a directory and a missing path; word: a value none of its own (OUT_OF_RANGE);
#   str: the missing value only. Every kind: the option last, without its value, and
#   followed by another option instead of its value.
check() {
    local script=$1 spec opt kind oor
    local -a pre=() post=()
    read -r -a pre <<< "$2"
    read -r -a post <<< "$3"
    shift 3
    for spec in "$@"; do
        IFS=: read -r opt kind oor <<< "$spec"
        expect "$script" "$opt" "no value" "${pre[@]}" "$opt"
        expect "$script" "$opt" "an option for its value" "${pre[@]}" "$opt" --help-me "${post[@]}"
        case $kind in
            int|num)
                expect "$script" "$opt" "out of range" "${pre[@]}" "$opt" "$oor" "${post[@]}"
                expect "$script" "$opt" "negative" "${pre[@]}" "$opt" -3 "${post[@]}"
                expect "$script" "$opt" "not a number" "${pre[@]}" "$opt" many "${post[@]}"
                [[ $kind == num ]] || expect "$script" "$opt" "not whole" "${pre[@]}" "$opt" 1.5 "${post[@]}" ;;
            file)
                expect "$script" "$opt" "a directory" "${pre[@]}" "$opt" "$tmp" "${post[@]}"
                expect "$script" "$opt" "a missing file" "${pre[@]}" "$opt" "$tmp/none" "${post[@]}" ;;
            word)
                expect "$script" "$opt" "an unknown word" "${pre[@]}" "$opt" "$oor" "${post[@]}"
                expect "$script" "$opt" "negative" "${pre[@]}" "$opt" -3 "${post[@]}" ;;
            str) ;;
        esac
    done
}

T=jobs/testbed E=jobs/experiments D=jobs/dev
check $T/testbed.sh "" "-- generate" --ranks:int:300 --cpu-pct:int:101 --slowdown:num:1001 --at:word:5:link=x \
    --cpu-period-ms:int:1001 --delay-ms:num:60001 --jitter-ms:num:60001 --loss-pct:num:101 --rate-mbit:num:1000001 \
    --port:int:65500
check $T/hosts.sh "--cluster $tmp/cluster.json" "-- generate" --ranks:int:201 --timeout:int:10000000 \
    --hostfile:file --btl-if:word:1.2.3.4/40 --oob-if:word:-eth0 --mca-check:word:on --stats:str
check $T/hosts.sh "" "-- generate" --cluster:file
check $T/sweep.sh "" "" --model:file --tokens:int:1000001 --ranks:int:257 --delays:num:60001 --losses:num:101 \
    --cpu-pct:int:101 --hosts:file --cluster:file --wire-dtype:word:fp8 --name:word:a/b --planners:word:best \
    --tolerances:word:x --prompt:str --out:str
check $T/soak.sh "" "" --generations:int:1000001 --steps:int:1000001 --loss-pct:num:101 --port:int:65500 --out:str
check $T/resilient_generate.sh "--hostfile $tmp/hosts" "" --np:int:257 --max-launches:int:1001 --steps:int:1048577 \
    --temperature:num:101 --top-p:num:2 --seed:word:x --model:file --journal:str --json:str --prompt:str
check $T/resilient_generate.sh "" "" --hostfile:file
# after --: what the script sets itself or a resumed launch (generate --resume) refuses, in every
# spelling getopt_long takes, is refused before launch 1 (not when launch 2 should recover)
for w in "-n 7" "-n7" "--steps=3" "--temp 1" "-s 3" "--top-k 5" "--chat" "--system hi" "--chat-template qwen3" \
         "--journal x" "--resume x" "--repeat 2" "--ignore-eos" "-m $tmp/model.h5" "--prompt hi"; do
    read -r -a ws <<< "$w"
    expect $T/resilient_generate.sh "'${ws[0]}' after --: this script sets it itself" "$w after --" \
        --hostfile "$tmp/hosts" --steps 5 -- --planner layerwise "${ws[@]}"
done
check $T/interconnects.sh "" "" --ranks:int:17 --tokens:int:10000 --repeat:int:10000 --planner:word:best --model:file
check $E/bench_distributed.sh "" "" --model:file --ranks:int:257 --steps:int:1000001 --repeat:int:1000001 \
    --wire-dtype:word:fp8 --planners:word:best --name:word:a/b
check $E/bench_gguf.sh "" "" --rounds:int:1001 --gen:int:1025 --convert-rounds:int:1001 --check-tokens:int:129 --prefill:int:2048 \
    --seed:int:1000000000 --port:int:65536 --llamacpp:str --dllama:str --out:str --work:str
check $E/batch_throughput.sh "" "" --model:file --cluster:file --ranks:int:65 --batches:int:65 --steps:int:100001 \
    --rounds:int:101 --planners:word:Best --lock:str
check $E/batch_throughput.sh "--http" "" --tokens:int:4097 --per-client:int:1001 --ranks:int:65 --batches:int:1
check $E/serve_reference.sh "" "" --model:file --rounds:int:101 --requests:int:101 --max-tokens:int:201 \
    --planner:word:Best --port:int:65535 --prompt:str --lock:str --work:str --dllama:str
check $E/bench_reference.sh "" "" --rounds:int:1001 --steps:int:257 --tinyllama-rounds:int:1001 \
    --tinyllama-steps:int:2049 --port:int:65536 --llama2c:str --dllama:str --out:str --work:str
check $E/critical_path.sh "" "" --ranks:int:10 --cpu-pct:int:101 --steps:int:1000001 --delays:word:5 --out:str
check $E/energy.sh "" "" --out:str
check $E/precision_quality.sh "" "" --model:file --out:str
check $E/pruning.sh "" "" --model:file --out:str
check $E/scaling.sh "" "" --scenario:word:all2 --out:str
check $E/series_feasibility.sh "" "" --out:str
check $E/series_quality.sh "" "" --devices:int:257 --seeds:int:1001 --epochs:int:100001 --stage-epochs:int:100001 \
    --max-samples:int:100000001 --ratios:num:1 --dropout:num:1.5 --only:word:both --datasets:str --out:str
check $E/series_testbed.sh "" "" --slowdown:num:1001 --cpu-pct:int:101 --rate-mbit:num:1000001 --delay-ms:num:60001 \
    --devices:int:257 --windows:int:1000001 --wire-dtype:word:fp8 --model:file --out:str
check $E/serve_load.sh "" "" --model:file --np:int:65 --max-batch:int:257 --requests:int:100001 \
    --concurrency:int:1025 --stream-pct:num:101 --cancel-pct:num:101 --min-tokens:int:4097 --max-tokens:int:4097 \
    --seed:int:1000000001 --name:word:a/b
check $E/somegather_quality.sh "" "" --ranks:int:257 --seeds:int:1001 --model:file --out:str
check $E/somegather_testbed.sh "" "" --out:str
check $E/sim_study.sh "" "" --devices:int:257 --tokens:int:2001 --seed:int:1000000000 --exact-seconds:num:100001 \
    --out:str
check $E/sim_validate.sh "" "" --ranks:int:10 --delays:num:1001 --cpu-pct:num:101 --planners:word:best \
    --tokens:int:201 --repeat:int:21 --replan-cluster:file --replan-delay:num:1001 --replan-tokens:int:241 --kv-positions:int:257 \
    --lock:str --out:str
check $E/voltron.sh "" "" --steps:int:1000001 --out:str
check $D/coverage.sh "" "" --min-command:num:101 --build-dir:str
check $D/fuzz.sh "" "" --seconds:int:1000000000 --jobs:int:65 --build-dir:str
check $D/mutate.sh "" "" --only:int:10000 --out:str
check $D/sanitize.sh "" "" --soak:int:1000001 --build-dir:str
check jobs/run_tests.sh "" "" -j:int:1025 --timeout:int:1000000 -R:str

# two devices of one name would be one host for a --hostfile's two ranks
printf '{"devices": [{"name": "a", "mem_mb": 500}, {"name": "a", "mem_mb": 500}]}\n' > "$tmp/dup.json"
expect $T/hosts.sh "devices[1].name 'a' is also devices[0]'s" "a device name twice" --cluster "$tmp/dup.json" -- generate
printf '{"devices": [{"mem_mb": 500}, {"name": "dev0", "mem_mb": 500}]}\n' > "$tmp/dup.json"
expect $T/hosts.sh "devices[1].name 'dev0' is also devices[0]'s" "a name another device has by default" \
    --cluster "$tmp/dup.json" -- generate

echo "$pass passed, $fail failed"
((fail == 0))
