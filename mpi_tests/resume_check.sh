#!/usr/bin/env bash
# a generation survives a lost device. jobs/testbed/resilient_generate.sh
# runs a 5-rank generation (layer-wise: exact at any rank count) from a
# hostfile; a worker rank, chosen at random, is killed (SIGKILL) at a random
# token; the job relaunches on the 4 ranks left with generate --resume, and
# its text must equal an uninterrupted run's, greedy and seeded sampling
# alike. Also: the time from the kill to the next token, journals refused
# whole (another model, damaged, options given twice), a finished journal's
# text printed without computing, and the distributed options carried by the
# journal (those that change the tokens may not be changed on resume).
# With --testbed the killed runs are on jobs/testbed/testbed.sh (5 devices at a full
# core each, 2 ms links: TCP between ranks, each rank in its cgroup), and only
# those cases run.
# usage: resume_check.sh MESHINFER MODEL.h5 [SEED] [--testbed]
set -uo pipefail
bin=$1 model=$2
RANDOM=${3:-$$}
testbed=()
if [[ "${4:-}" == --testbed ]]; then
    ((EUID == 0)) || { echo "skipped: the testbed needs root"; exit 77; }
    testbed=("$(cd "$(dirname "$0")/.." && pwd)/jobs/testbed/testbed.sh" --ranks 5 --cpu-pct 100 --delay-ms 2 --jitter-ms 0 --launcher --)
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'pkill -9 -f "$tmp/j.json" 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
count() { if [[ -f "$1" ]]; then awk '/^t / {n++} END {print n + 0}' "$1"; else echo 0; fi; }
printf 'localhost slots=5\n' > "$tmp/hosts"

# rank_pid R: the pid of this job's rank R (its command line names this test's journal; Open MPI
# puts the rank in each process's environment)
rank_pid() {
    for p in $(pgrep -f "^$bin generate .*$tmp/j.json"); do
        [[ $(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p') == "$1" ]] && { echo "$p"; return; }
    done
}

one_case() { # NAME GENERATE-OPTIONS...
    local name=$1; shift
    local want steps=160 at=$((20 + RANDOM % 100)) victim=$((1 + RANDOM % 4))
    want=$("$bin" generate -m "$model" -n $steps --ignore-eos "$@" 2>/dev/null)
    local opts=() a
    while (($#)); do
        case "$1" in
            -t) opts+=(--temperature "$2"); shift 2 ;;
            -s) opts+=(--seed "$2"); shift 2 ;;
            *) a=$1; shift; opts+=("$a") ;;
        esac
    done
    rm -f "$tmp/j.json"
    MESHINFER_BIN="$bin" timeout 300 "${testbed[@]}" "$root/jobs/testbed/resilient_generate.sh" --hostfile "$tmp/hosts" --journal "$tmp/j.json" \
        --json "$tmp/res.json" --model "$model" --steps $steps --ignore-eos "${opts[@]}" -- --planner layerwise \
        > "$tmp/got" 2> "$tmp/err" &
    local job=$! n=0 pid="" t_kill=""
    for _ in $(seq 3000); do
        n=$(count "$tmp/j.json")
        ((n >= at)) && break
        sleep 0.005
    done
    pid=$(rank_pid $victim)
    if [[ -n "$pid" ]]; then
        kill -9 "$pid"
        t_kill=$(date +%s.%N)
        n=$(count "$tmp/j.json")
    fi
    wait $job
    local rc=$?
    if [[ -z "$pid" ]]; then bad "$name: rank $victim not found to kill"; return; fi
    local got
    got=$(cat "$tmp/got")
    local summary
    summary=$(node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1])); const l = r.launches;
      console.log(l.map(x => x.ranks).join(">"), l.length > 1 && l[1].next_token_at ? (l[1].next_token_at - +process.argv[2]).toFixed(2) : "none",
                  l.length > 1 ? (l[0].ended_at - +process.argv[2]).toFixed(2) : "none")' "$tmp/res.json" "$t_kill" 2>&1)
    read -r ranks next detect <<<"$summary"
    if ((rc == 0)) && [[ -n "$want" && "$got" == "$want" && $ranks == "5>4" ]]; then
        ok "$name: rank $victim killed at token $n of $steps; relaunched on 4 ranks, the uninterrupted run's text ($next s from the kill to the next token, $detect s of it until mpirun noticed)"
    else
        bad "$name: rc $rc, launches $ranks, text equal: $([[ "$got" == "$want" ]] && echo yes || echo no)"
        sed 's/^/    /' "$tmp/err" | tail -6
    fi
}
one_case greedy
one_case "sampled (T 0.9, seed 7)" -t 0.9 -s 7
if ((${#testbed[@]})); then
    echo "$pass passed, $fail failed (on the testbed)"
    ((fail == 0))
    exit
fi

# the script fails (--max-launches 1, a rank killed): its own journal, unfinished, is kept and
# named, and generate --resume of it makes the uninterrupted run's text
mkdir -p "$tmp/kt"
want=$("$bin" generate -m "$model" -n 160 --ignore-eos 2>/dev/null)
TMPDIR="$tmp/kt" MESHINFER_BIN="$bin" timeout 300 "$root/jobs/testbed/resilient_generate.sh" --hostfile "$tmp/hosts" \
    --max-launches 1 --model "$model" --steps 160 --ignore-eos -- --planner layerwise > /dev/null 2> "$tmp/kerr" &
job=$! pid=""
for _ in $(seq 3000); do
    j=$(compgen -G "$tmp/kt/meshinfer-resilient.*/journal.json" | head -1)
    [[ -n "$j" ]] && (($(count "$j") >= 10)) && break
    sleep 0.005
done
for p in $(pgrep -f "^$bin generate .*$tmp/kt/meshinfer-resilient"); do
    [[ $(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p') == 2 ]] && pid=$p
done
[[ -n "$pid" ]] && kill -9 "$pid"
wait $job; rc=$?
kept=$(sed -n 's/.*the unfinished journal is kept at \([^:]*\): meshinfer generate --resume .*/\1/p' "$tmp/kerr")
if ((rc == 1)) && [[ -n "$pid" && -f "$kept" && $kept == "$tmp/kt/meshinfer-journal."* ]] && ! grep -q '^done' "$kept" &&
   [[ "$("$bin" generate --resume "$kept" 2>/dev/null)" == "$want" ]]; then
    ok "the script gave up (--max-launches 1): its unfinished journal kept ($(count "$kept") tokens at the end), named, and resumable to the uninterrupted text"
else
    bad "a failed script's journal: exit $rc, killed '$pid', kept '$kept': $(grep -v '^-*$' "$tmp/kerr" | tail -3)"
fi

# a finished journal: its text again, nothing computed
"$bin" generate -m "$model" -n 30 -t 0.8 -s 3 --journal "$tmp/done.json" > "$tmp/a" 2>/dev/null
"$bin" generate --resume "$tmp/done.json" > "$tmp/b" 2> "$tmp/e"
cmp -s "$tmp/a" "$tmp/b" && grep -q "was already finished (30 tokens)" "$tmp/e" && ok "--resume of a finished journal prints its text, says it was finished" ||
    bad "--resume of a finished journal: $(cat "$tmp/e")"

# the distributed options come from the journal: somegather's pruning changes the text, and a resume
# given no options must still make the pruned run's tokens
mpi=(timeout 120 mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 3)
"${mpi[@]}" "$bin" generate -m "$model" -n 40 --planner somegather --prune 0.05 --journal "$tmp/sg.json" > "$tmp/sg" 2>/dev/null
"${mpi[@]}" "$bin" generate -m "$model" -n 40 --planner somegather > "$tmp/sg0" 2>/dev/null
head -n 15 "$tmp/sg.json" > "$tmp/sg-cut.json"
"${mpi[@]}" "$bin" generate --resume "$tmp/sg-cut.json" > "$tmp/sg-resumed" 2> "$tmp/e"
if head -1 "$tmp/sg.json" | grep -q '"options":\["--planner","somegather","--prune","0.05"\]' &&
   ! cmp -s "$tmp/sg" "$tmp/sg0" && cmp -s "$tmp/sg" "$tmp/sg-resumed"; then
    ok "the journal keeps --planner somegather --prune 0.05; a resume given neither made the pruned run's text"
else
    bad "distributed options through the journal: $(head -c 400 "$tmp/sg.json" | grep -o '"options":[^]]*]'); $(tail -2 "$tmp/e")"
fi
expect_error() {
    local what=$1 re=$2; shift 2
    timeout 60 "$@" >/dev/null 2>"$tmp/e"; local rc=$?
    if [[ $rc -eq 0 || $rc -eq 124 ]]; then bad "$what: exit $rc"; return; fi
    if [[ $(grep -c . "$tmp/e") -ne 1 ]] || ! grep -Eq -- "^meshinfer: error: .*($re)" "$tmp/e"; then
        bad "$what: want one error line matching /$re/, got: $(cat "$tmp/e")"; return; fi
    ok "$what -> $(cat "$tmp/e")"
}
sed 's/"model_name":"stories15M","n_layers":6,"dim":288/"model_name":"stories42M","n_layers":8,"dim":512/' "$tmp/done.json" > "$tmp/other.json"
expect_error "--resume with another model" "journal .* is of stories42M .* but .* is stories15M" \
    "$bin" generate -m "$model" --resume "$tmp/other.json"
expect_error "--resume with a prompt" "--resume takes the prompt, -n" \
    "$bin" generate --resume "$tmp/done.json" -p "Hello"
# a run killed mid-line: the torn line is dropped and cut off, the generation goes on from the line before
head -n -3 "$tmp/done.json" > "$tmp/torn.json"
printf 't 29' >> "$tmp/torn.json"
"$bin" generate --resume "$tmp/torn.json" > "$tmp/c" 2> "$tmp/e"
cmp -s "$tmp/a" "$tmp/c" && [[ $(tail -1 "$tmp/torn.json") =~ ^done\ [0-9a-f]{16}$ ]] && ! grep -q "^t 29$" "$tmp/torn.json" &&
    ok "a journal with a torn last line: dropped, cut off, the same text ($(grep -o '[0-9]* tokens replayed' "$tmp/e"))" ||
    bad "a torn journal: $(cat "$tmp/e") $(tail -3 "$tmp/torn.json")"
head -c 200 "$tmp/done.json" > "$tmp/cut.json"
expect_error "a journal cut inside its first line" "no whole first line" "$bin" generate --resume "$tmp/cut.json"
sed '0,/^t /s/^t [0-9]* /t 999999 /' "$tmp/done.json" > "$tmp/big.json"
expect_error "a journal with a token past the vocabulary" "token below vocab_size 32000" \
    "$bin" generate --resume "$tmp/big.json"
sed '0,/^t /s/^t \([0-9]*\) [0-9a-f]* /t \1 00000000000000zz /' "$tmp/done.json" > "$tmp/rng.json"
expect_error "a journal with a damaged sampler state" "line 2 is not 't TOKEN STATE CHECK'" "$bin" generate --resume "$tmp/rng.json"
sed '0,/^t /s/^t \([0-9]*\) /t +\1 /' "$tmp/done.json" > "$tmp/sign.json"
expect_error "a token with a sign" "line 2 is not 't TOKEN STATE CHECK'" "$bin" generate --resume "$tmp/sign.json"
sed '1s/"sampler_state":"[0-9a-f]*"/"sampler_state":"0x2a"/' "$tmp/done.json" > "$tmp/hex.json"
expect_error "a sampler state in another notation" "sampler_state '0x2a' is not 16 hex digits" "$bin" generate --resume "$tmp/hex.json"
sed '0,/^t /s/^t [0-9]* /t 2 /' "$tmp/done.json" > "$tmp/eos.json"
expect_error "EOS in the middle of a run that stops at EOS" "is BOS or EOS, where the run stopped" "$bin" generate --resume "$tmp/eos.json"
"$bin" quantize -m "$model" --dtype q8_0 --out "$tmp/q8.h5" > /dev/null 2>&1
expect_error "--resume on the same model in other dtypes" "journal .* is of stories15M .*fp32.* but .* q8_0" \
    "$bin" generate -m "$tmp/q8.h5" --resume "$tmp/done.json"
cp "$tmp/done.json" "$tmp/keep.json"
expect_error "--trace onto the journal" "trace file is the same file as the input" \
    "$bin" generate --resume "$tmp/keep.json" --trace "$tmp/keep.json"
cmp -s "$tmp/done.json" "$tmp/keep.json" && ok "the journal unchanged after --trace onto it" || bad "--trace changed the journal"
expect_error "--trace and --journal one new file" "--trace and the journal name the same file" \
    "$bin" generate -m "$model" -n 3 --journal "$tmp/new.json" --trace "$tmp/new.json"
sed '1s/"steps":30/"steps":30,"stpes":3/' "$tmp/done.json" > "$tmp/key.json"
expect_error "a journal with an unknown key" "unknown key 'stpes'" "$bin" generate --resume "$tmp/key.json"
expect_error "--resume of a missing journal" "journal" "$bin" generate --resume "$tmp/none.json"
head -n 15 "$tmp/sg.json" > "$tmp/sg-cut.json"
expect_error "--resume with another --prune than the journal's" "made with --prune 0.05, which changes the tokens" \
    "$bin" generate --resume "$tmp/sg-cut.json" --prune 0.1
expect_error "--resume adding --wire-dtype" "made without --wire-dtype, which changes the tokens" \
    "$bin" generate --resume "$tmp/sg-cut.json" --wire-dtype q8_0
# options compared by their effect, not their spelling: fp32 is the default, 0.050 is 0.05
"${mpi[@]}" "$bin" generate --resume "$tmp/sg-cut.json" --wire-dtype fp32 --prune 0.050 > "$tmp/sg-fp32" 2> "$tmp/e" &&
    cmp -s "$tmp/sg" "$tmp/sg-fp32" && ok "--resume with --wire-dtype fp32 (the default) and --prune 0.050 (the journal's 0.05): accepted, the same text" ||
    bad "--resume with the default --wire-dtype fp32: $(tail -1 "$tmp/e")"
expect_error "--resume with --chat" "--ignore-eos, --chat, --system and --chat-template from the journal" \
    "$bin" generate --resume "$tmp/done.json" --chat
sed '1s/"options":\[[^]]*\]/"options":["--prune"]/' "$tmp/sg.json" > "$tmp/opt.json"
expect_error "a journal whose option lacks its value" "option '--prune' has no value after it" \
    "$bin" generate --resume "$tmp/opt.json"
sed '1s/"options":\[[^]]*\]/"options":["--trace","x.json"]/' "$tmp/sg.json" > "$tmp/opt.json"
expect_error "a journal carrying an output option" "option '--trace' is not a distributed option" \
    "$bin" generate --resume "$tmp/opt.json"
sed '1s/"options":\[[^]]*\]/"options":"--speculate"/' "$tmp/sg.json" > "$tmp/opt.json"
expect_error "a journal whose options are not an array" "options must be an array" \
    "$bin" generate --resume "$tmp/opt.json"
expect_error "--journal-sync without a journal" "--journal-sync syncs the journal" \
    "$bin" generate -m "$model" -n 3 --journal-sync
expect_error "--journal onto the model" "same file" "$bin" generate -m "$model" --journal "$model"
echo "$pass passed, $fail failed"
((fail == 0))
