#!/usr/bin/env bash
# A generation that survives lost devices (Petals-style
# history replay): runs `meshinfer generate --journal` under mpirun on the
# hosts of a hostfile; when a rank dies (mpirun names its host), relaunches
# `generate --resume` on the hosts left -- the hostfile with one slot of that
# host taken away -- which re-plans for the ranks left, replays the journal's
# tokens and goes on, until the generation is done or no rank is left. The
# text printed is the last run's, from the start, and equals an uninterrupted
# run's for greedy and seeded sampling alike with an exact planner (fp32
# messages; layerwise, greedy, roundrobin: bit-identical at any rank count;
# tp and somegather sum partial results in an order that depends on it).
#
# usage: jobs/testbed/resilient_generate.sh --hostfile FILE [--np N] [--journal FILE] [--json FILE]
#            [--model M] [--prompt P] [--steps N] [--temperature T] [--top-p P] [--seed S]
#            [--ignore-eos] [--max-launches K] [-- OPTIONS-FOR-EVERY-LAUNCH...]
#   --np N         ranks of the first launch (default: the hostfile's slots)
#   --journal F    the journal (default: a temporary file, removed when the generation finished;
#                  when it did not, an unfinished one is kept and its path said, for generate --resume)
#   --json F       a summary: launches (ranks, exit, host lost, tokens journaled, start and end
#                  times), the time from a launch's failure to the resumed run's next token
#   --max-launches K   give up after K launches (default 8)
#   after --: generate options every launch gets (--planner, --cluster, --wire-dtype...); not those
#                  this script sets (-m, -p, -n, -t, -s, --top-p, --ignore-eos, --journal, ...) nor
#                  those a resumed launch refuses (--top-k, --chat, --system, --chat-template,
#                  --resume, --repeat): refused before launch 1, not when launch 2 would need them
# Exit 0 when the generation finished; 1 when it could not (no rank left, a
# failure that is not a lost rank, or --max-launches reached), saying why.
# environment: MESHINFER_BIN the binary (default build/meshinfer);
#   MESHINFER_TESTBED_MPI, MESHINFER_TESTBED_WRAPPER: set by
#   `jobs/testbed/testbed.sh --launcher -- jobs/testbed/resilient_generate.sh ...` to run every
#   launch on the emulated devices and links
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
# shellcheck disable=SC2034 # (read by fail in common.sh)
fail_status=2 # (until the first launch: what is refused before it is the command line)
hostfile="" np=0 journal="" json="" max_launches=8
first=() every=() after=0 # (every[after..]: the words after --)
while (($#)); do
    case "$1" in
        --hostfile|--np|--journal|--json|--max-launches|--model|--prompt|--steps|--temperature|--top-p|--seed)
            need_value "$@" ;;&
        --hostfile) hostfile=$2; shift 2 ;;
        --np) np=$2; shift 2 ;;
        --journal) journal=$2; shift 2 ;;
        --json) json=$2; shift 2 ;;
        --max-launches) max_launches=$2; shift 2 ;;
        --model) every+=(-m "$2"); shift 2 ;;
        --prompt) first+=(-p "$2"); shift 2 ;;
        --steps) opt_int "$1" "$2" 1 1048576; first+=(-n "$2"); shift 2 ;;
        --temperature) opt_num "$1" "$2" 0 100; first+=(-t "$2"); shift 2 ;;
        --top-p) opt_num "$1" "$2" 0.000001 1; first+=(--top-p "$2"); shift 2 ;;
        --seed) [[ $2 =~ ^[0-9]{1,20}$ ]] || arg_fail "--seed '$2' is not a whole number from 0 to 2^64-1"
                first+=(-s "$2"); shift 2 ;;
        --ignore-eos) first+=(--ignore-eos); shift ;;
        --) shift; after=${#every[@]}; every+=("$@"); break ;;
        *) bad_option "$1" ;;
    esac
done
# every launch after the first is `generate --resume`: an option after -- that this script sets
# (it would be given twice, one silently lost) or that --resume refuses would fail exactly the
# launch that should recover, so it is refused now. getopt_long takes --name=value and unique
# abbreviations, and short options with their value attached (-n7): all are matched.
own_opts=(model prompt steps temperature top-p top-k seed ignore-eos journal resume chat system chat-template repeat)
for w in "${every[@]:after}"; do
    hit=0
    case $w in
        --?*) name=${w#--}; name=${name%%=*}
              for o in "${own_opts[@]}"; do [[ $o == "$name"* ]] && hit=1; done ;;
        -[!-]*) [[ ${w:1} =~ ^h*[mpnts] ]] && hit=1 ;;
    esac
    ((hit)) && arg_fail "'$w' after --: this script sets it itself (--model, --prompt, --steps, --temperature, --top-p, --seed, --ignore-eos, --journal) or a resumed launch (generate --resume) refuses it"
done
[[ -n "$hostfile" ]] || arg_fail "--hostfile is required (see --help)"
opt_file --hostfile "$hostfile"
opt_int --np "$np" 0 256 # (0: every slot of the hostfile)
opt_int --max-launches "$max_launches" 1 1000
for ((i = 0; i < ${#every[@]}; i++)); do [[ ${every[$i]} == -m ]] && opt_file --model "${every[$((i + 1))]}"; done

# outputs are checked before anything runs, as meshinfer checks its own: not a directory, in a
# directory that exists and can be written, and never one of the inputs (by device and inode, so
# another name or a link of the model is caught too)
model_arg=""
for ((i = 0; i < ${#every[@]}; i++)); do [[ ${every[$i]} == -m ]] && model_arg=${every[$((i + 1))]}; done
check_output() { # WHAT PATH
    local what=$1 p=$2 dir
    [[ -n "$p" ]] || fail "$what: empty path"
    [[ -d "$p" ]] && fail "$what '$p' is a directory"
    dir=$(dirname -- "$p")
    [[ -d "$dir" ]] || fail "$what '$p': directory '$dir' does not exist"
    [[ -w "$dir" ]] || fail "$what '$p': directory '$dir' is not writable"
    if [[ -e "$p" ]]; then
        local id
        id=$(stat -L -c %d:%i -- "$p")
        for input in "$hostfile" "$model_arg" "${MESHINFER_BIN:-$root/build/meshinfer}"; do
            [[ -n "$input" && -e "$input" && $(stat -L -c %d:%i -- "$input") == "$id" ]] &&
                fail "$what '$p' is the same file as the input '$input'; refusing to overwrite it"
        done
    fi
    return 0
}
[[ -n "$json" ]] && check_output "--json" "$json"
[[ -n "$journal" ]] && check_output "--journal" "$journal"
[[ -n "$json" && -n "$journal" && "$(realpath -m -- "$json")" == "$(realpath -m -- "$journal")" ]] &&
    fail "--json and --journal name the same file"
meshinfer_bin
work="$(mktemp -d "${TMPDIR:-/tmp}/meshinfer-resilient.XXXXXX")"
own_journal=0
# a journal that could still be resumed is never deleted: when the script fails, an unfinished one
# of its own is moved out of the work directory, and its place said either way
keep_journal() {
    if ((${launch:-0} > 0)) && [[ -n "$journal" && -s "$journal" ]] && ! grep -q '^done ' "$journal"; then
        if ((own_journal)); then
            local kept
            kept=$(mktemp --suffix=.json "${TMPDIR:-/tmp}/meshinfer-journal.XXXXXX") && mv -f "$journal" "$kept" && journal=$kept
        fi
        say "the unfinished journal is kept at $journal: meshinfer generate --resume $journal goes on from it"
    fi
    rm -rf "$work"
}
trap keep_journal EXIT
[[ -n "$journal" ]] || { journal="$work/journal.json"; own_journal=1; }
[[ -e "$journal" ]] && fail "journal '$journal' exists: a new generation needs a new journal (generate --resume goes on from one)"
# the hosts as "name slots" lines (comments, blank lines and carriage returns dropped; slots=1 when
# not given); a slot count that is not a whole number from 1 to 9999 is named, not passed to mpirun
awk '{sub(/\r$/, "")} !/^[[:space:]]*(#|$)/ {s = 1; for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) {sub(/^slots=/, "", $i); s = $i}
     if (s !~ /^[1-9][0-9]?[0-9]?[0-9]?$/) {printf "line %d: slots=%s is not a whole number from 1 to 9999\n", NR, s > "/dev/stderr"; bad = 1}
     print $1, s} END {exit bad}' "$hostfile" > "$work/hosts" 2> "$work/hosts.err" ||
    fail "hostfile '$hostfile' $(head -1 "$work/hosts.err")"
slots() { awk '{n += $2} END {print n + 0}' "$work/hosts"; }
(($(slots) > 0)) || fail "hostfile '$hostfile' lists no slots"
((np > 0)) || np=$(slots)
((np <= $(slots))) || fail "--np $np is more than the $(slots) slots of '$hostfile'"
# shellcheck disable=SC2034
fail_status=1

journaled() { # tokens in the journal so far (its whole "t TOKEN STATE CHECK" lines), and whether it is done
    [[ -f "$journal" ]] || { echo 0 false; return; }
    awk '/^t [0-9]+ [0-9a-f]+ [0-9a-f]+$/ {n++} /^done [0-9a-f]+$/ {d = 1} END {print n + 0, d ? "true" : "false"}' "$journal"
}
launches="[]"
launch=0 failed_at=0 count=0
while :; do
    launch=$((launch + 1))
    ((launch <= max_launches)) || fail "gave up after $max_launches launches (--max-launches)"
    awk '{print $1 " slots=" $2}' "$work/hosts" > "$work/hostfile"
    args=(generate "${every[@]}" --journal "$journal" "${first[@]}")
    ((launch > 1)) && args=(generate "${every[@]}" --resume "$journal")
    say "launch $launch on $np rank(s): ${args[*]}"
    t_launch=$(date +%s.%N)
    # the next token after a failure: when the journal first holds more than it did then
    watcher=""
    if ((launch > 1)); then
        (while :; do read -r n _ < <(journaled); ((n > count)) && { date +%s.%N > "$work/next"; exit 0; }; sleep 0.01; done) &
        watcher=$!
    fi
    set +e
    # on jobs/testbed/testbed.sh --launcher: its links' ports and each rank in its cgroup
    mpirun --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 ${MESHINFER_TESTBED_MPI:-} \
        --hostfile "$work/hostfile" -np "$np" ${MESHINFER_TESTBED_WRAPPER:+"$MESHINFER_TESTBED_WRAPPER"} "$bin" "${args[@]}" \
        > "$work/out" 2> "$work/err"
    rc=$?
    set -e
    t_end=$(date +%s.%N)
    [[ -n "$watcher" ]] && { kill "$watcher" 2>/dev/null || true; wait "$watcher" 2>/dev/null || true; }
    read -r count done < <(journaled)
    lost=$(grep -o 'process rank [0-9]* with PID [0-9]* on node [^ ]* exited on signal [0-9]*' "$work/err" | head -1 || true)
    host=$(sed -n 's/.* on node \([^ ]*\) exited.*/\1/p' <<<"$lost")
    next_s="" next_at=""
    [[ -f "$work/next" ]] && { next_at=$(cat "$work/next"); next_s=$(awk -v a="$failed_at" -v b="$next_at" 'BEGIN {printf "%.3f", b - a}'); }
    rm -f "$work/next"
    launches=$(node -e 'const a = process.argv, l = JSON.parse(a[1]); l.push({ranks: +a[2], exit: +a[3],
        lost_host: a[4] || null, lost: a[5] || null, tokens_journaled: +a[6], seconds: +a[7],
        next_token_after_failure_s: a[8] === "" ? null : +a[8], started_at: +a[9], ended_at: +a[10],
        next_token_at: a[11] === "" ? null : +a[11]});
        console.log(JSON.stringify(l))' "$launches" "$np" "$rc" "$host" "$lost" "$count" \
        "$(awk -v a="$t_launch" -v b="$t_end" 'BEGIN {printf "%.3f", b - a}')" "$next_s" "$t_launch" "$t_end" "$next_at")
    if ((rc == 0)) && [[ $done == true ]]; then
        cat "$work/out"
        grep -v '^$' "$work/err" | grep -v '^--*$' >&2 || true
        break
    fi
    if [[ -z "$host" ]]; then
        # meshinfer's own error line says what is wrong; mpirun's banners around it do not
        why=$(grep -m1 '^meshinfer: error:' "$work/err" || grep -v '^-*$' "$work/err" | grep -m1 . || true)
        fail "launch $launch failed (exit $rc) without a lost rank to take away${why:+: $why}"
    fi
    failed_at=$t_end
    # the hostfile's line for that host: by name, or, for this machine (mpirun names it by its
    # hostname), a line that names it as localhost, 127.x or its full name
    line=$(awk -v h="$host" '$1 == h {print NR; exit}' "$work/hosts")
    if [[ -z "$line" && ( "$host" == "$(hostname)" || "$host" == "$(hostname -s)" ) ]]; then
        line=$(awk -v f="$(hostname -f 2>/dev/null || hostname)" '$1 == "localhost" || $1 ~ /^127\./ || $1 == f {print NR; exit}' "$work/hosts")
    fi
    [[ -n "$line" ]] || fail "lost a rank on '$host', which the hostfile does not name: cannot tell which host to leave out"
    say "lost $lost after $count journaled tokens; relaunching without one slot of $(awk -v n="$line" 'NR == n {print $1}' "$work/hosts")"
    awk -v n="$line" 'NR == n {$2--} $2 > 0' "$work/hosts" > "$work/hosts.new"
    mv "$work/hosts.new" "$work/hosts"
    np=$(slots)
    ((np > 0)) || fail "no rank left to go on with"
done
if [[ -n "$json" ]]; then # whole or not at all: a temporary name, then renamed
    node -e 'require("fs").writeFileSync(process.argv[1], JSON.stringify({journal: process.argv[2] || null,
        launches: JSON.parse(process.argv[3])}, null, 1) + "\n")' "$json.partial.$$" "$( ((own_journal)) || echo "$journal")" "$launches" &&
        mv -f "$json.partial.$$" "$json" || { rm -f "$json.partial.$$"; fail "cannot write --json '$json'"; }
fi
((own_journal)) && rm -f "$journal"
exit 0
