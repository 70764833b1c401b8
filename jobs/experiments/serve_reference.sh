#!/usr/bin/env bash
# meshinfer serve beside distributed-llama's API server (dllama-api) over HTTP, one request at a time
# (all dllama-api offers): the same prompt, the same max_tokens, greedy, streamed, on 1 node / 1 rank
# and on 2 nodes (dllama-api + a `dllama worker` on 127.0.0.1) / 2 ranks (mpirun over TCP on loopback,
# like dllama's sockets; --planner tp by default, the tensor parallelism dllama uses), one thread per
# node/rank, each on its own core (1 node: core 0). The servers take turns: every round starts each
# server in turn (the order reversed every other round), sends one untimed request, then --requests
# timed ones from one client (jobs/lib/serve_one.js), and stops it; only one server runs at a time.
# Per request: tokens/s = completion tokens / the request's wall time (prefill, HTTP and streaming
# included), TTFT, TPOT = (last text event - first) / (tokens - 1). Medians over all rounds' requests,
# and the ratio meshinfer / distributed-llama.
#
# The same prompt: dllama-api only has chat completions and renders them itself (its Llama 2 kind:
# "[INST] TEXT [/INST]" then the EOS text "</s>", after BOS); stories15M has no chat template and its
# tokenizer reads "</s>" as plain text, so meshinfer gets that very text on /v1/completions (after BOS).
# Before timing, both must report the same prompt tokens, produce max_tokens tokens, and agree on at
# least the first half of the text (fp32 sums in another order: a near tie may go either way late on).
# distributed-llama gets the model through jobs/lib/to_dllama.py (f32 weights, the tokenizer with a
# Llama 2 chat template: --chat-template llama2, which dllama-api needs).
#
# usage: jobs/experiments/serve_reference.sh --dllama DIR [--model FILE] [--rounds N] [--requests N]
#            [--max-tokens N] [--prompt TEXT] [--planner NAME] [--lock FILE] [--port P] [--work DIR]
#   --dllama DIR   distributed-llama: DIR/dllama-api and DIR/dllama when they are there and newer
#                  than their sources, else DIR/Makefile and DIR/src built in --work (`make dllama
#                  dllama-api`); the checkout is only read
#   defaults: stories15M, 5 rounds, 3 requests, max_tokens 128, prompt "Tell me a story about a cat.",
#   planner tp, port 9890 (9891: the dllama worker), work .cache/serve_reference
#   --lock FILE    every server's turn under `flock FILE` (shared with the machine's other measurements)
# Writes results/serve_reference/: rows.jsonl (one line per turn), summary.md, summary.csv; prints the table.
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
# shellcheck source=../lib/reference_builds.sh
. "$root/jobs/lib/reference_builds.sh"
dllama="" model="" rounds=5 nreq=3 maxtok=128 prompt="Tell me a story about a cat." planner=tp lock="" port=9890
work="$root/.cache/serve_reference"
while (($#)); do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --dllama|--model|--rounds|--requests|--max-tokens|--prompt|--planner|--lock|--port|--work) need_value "$@" ;;&
        --dllama) dllama=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --requests) nreq=$2; shift 2 ;;
        --max-tokens) maxtok=$2; shift 2 ;;
        --prompt) prompt=$2; shift 2 ;;
        --planner) planner=$2; shift 2 ;;
        --lock) lock=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
opt_int --rounds "$rounds" 1 100
opt_int --requests "$nreq" 1 100
opt_int --max-tokens "$maxtok" 2 200
opt_port --port "$port" 1
[[ $planner =~ ^[a-z]+$ ]] || arg_fail "--planner '$planner' is not a planner name"
[[ -n $prompt && $prompt != *'"'* && $prompt != *\\* ]] || arg_fail "--prompt must be non-empty, without quotes or backslashes"
[[ -z $model ]] || opt_file --model "$model"
opt_lock --lock "$lock"
[[ -n $dllama ]] || arg_fail "give --dllama DIR (a distributed-llama checkout; see --help)"
dllama="$(cd "$dllama" 2> /dev/null && pwd)" || arg_fail "--dllama: no such folder"
work_abs="$(realpath -m -- "$work")"
[[ $dllama != "$work_abs/dllama" && $dllama != "$work_abs/dllama/"* ]] ||
    arg_fail "--dllama $dllama lies in --work's dllama folder, which this script rebuilds: give another --work"
[[ -f $dllama/Makefile && -f $dllama/src/dllama-api.cpp ]] ||
    fail "--dllama $dllama has no Makefile and src/dllama-api.cpp (a distributed-llama checkout?)"
command -v node > /dev/null || fail "node is needed (the client)"
command -v curl > /dev/null || fail "curl is needed"
(($(nproc) >= 2)) || fail "2 cores are needed (one per node/rank)"
meshinfer_bin
real_model
py=/usr/bin/python3
out="$root/results/serve_reference"
out_dir "$out" "$work" "$work/logs"
logs="$work/logs"
wport=$((port + 1))

# distributed-llama's binaries: the checkout's when up to date, else built in $work
if [[ -x $dllama/dllama-api && -x $dllama/dllama && ! $dllama/src/dllama-api.cpp -nt $dllama/dllama-api ]]; then
    dl_api=$dllama/dllama-api dl_bin=$dllama/dllama
else
    rm -rf "$work/dllama"; mkdir -p "$work/dllama"
    cp -r "$dllama/Makefile" "$dllama/src" "$work/dllama/"
    say "building distributed-llama ($dllama, $(commit_of "$dllama")) in $work/dllama"
    make -C "$work/dllama" -j 2 dllama dllama-api > "$logs/dllama-build.log" 2>&1 ||
        fail "building distributed-llama failed (see $logs/dllama-build.log)"
    dl_api=$work/dllama/dllama-api dl_bin=$work/dllama/dllama
fi
dl_m="$work/$(basename "$model" .h5)-f32.m" dl_t="$work/$(basename "$model" .h5)-llama2chat.t"
for f in "$dl_m" "$dl_t"; do
    if [[ ! -f $f || $model -nt $f || $root/jobs/lib/to_dllama.py -nt $f ]]; then
        if [[ $f == "$dl_m" ]]; then a=(--weights f32 --model-out "$f"); else a=(--tokenizer-out "$f" --chat-template llama2); fi
        "$py" "$root/jobs/lib/to_dllama.py" -m "$model" "${a[@]}" 2> "$logs/convert.log" ||
            fail "to_dllama.py failed: $(tail -1 "$logs/convert.log")"
    fi
done
mesh_text="[INST] $prompt [/INST]</s>" # what dllama-api's Llama 2 kind renders (BOS added by both)

pids=()
stop_all() { local p; for p in "${pids[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
             for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done; pids=(); }
trap stop_all EXIT
port_free() { ! (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }
ready() { # until the server on $port answers /v1/models (at most 60 s)
    local i
    for ((i = 0; i < 600; i++)); do
        curl -s -o /dev/null -m 2 "http://127.0.0.1:$port/v1/models" && return 0
        kill -0 "${pids[-1]}" 2> /dev/null || return 1
        sleep 0.1
    done
    return 1
}
start() { # start SERVER NODES LOG: the server in the background, its pids in pids[]
    local s=$1 n=$2 lg=$3
    port_free "$port" || fail "port $port is in use (--port)"
    if [[ $s == dllama ]]; then
        local w=()
        if ((n == 2)); then
            port_free "$wport" || fail "port $wport is in use (--port + 1: the dllama worker)"
            taskset -c 1 "$dl_bin" worker --port "$wport" --nthreads 1 > "$lg.worker" 2>&1 &
            pids+=($!)
            w=(--workers "127.0.0.1:$wport")
            sleep 1
        fi
        taskset -c 0 "$dl_api" --model "$dl_m" --tokenizer "$dl_t" --buffer-float-type f32 --nthreads 1 \
            --port "$port" --temperature 0 --seed 1 "${w[@]}" > "$lg" 2>&1 &
        pids+=($!)
    elif ((n == 1)); then
        OPENBLAS_NUM_THREADS=1 taskset -c 0 "$bin" serve -m "$model" --port "$port" --max-batch 1 > "$lg" 2>&1 &
        pids+=($!)
    else
        # mpirun itself in the background (not a shell function): its pid is the one stopped
        mpirun --allow-run-as-root -q -np 2 --bind-to core --mca btl self,tcp --mca btl_tcp_if_include lo \
            --mca osc pt2pt -x OPENBLAS_NUM_THREADS=1 \
            "$bin" serve -m "$model" --port "$port" --max-batch 1 --planner "$planner" > "$lg" 2>&1 &
        pids+=($!)
    fi
    ready || { stop_all; fail "$s on $n node(s) did not start (see $lg)"; }
}
kind_of() { [[ $1 == dllama ]] && echo chat || echo completions; }
text_of() { [[ $1 == dllama ]] && echo "$prompt" || echo "$mesh_text"; }
url="http://127.0.0.1:$port"

# ------------------------------------------------------------------ the check
say "check: the same prompt tokens, $maxtok tokens and the same text from both, 1 node"
declare -A chk
for s in meshinfer dllama; do
    start "$s" 1 "$logs/check-$s.log"
    chk[$s]=$(node "$root/jobs/lib/serve_one.js" "$url" "$(kind_of $s)" "$(text_of $s)" "$maxtok" "$maxtok" 1 check) ||
        { stop_all; fail "$s's check request failed"; }
    stop_all
done
node -e '
const [m, d, n] = process.argv.slice(1); const a = JSON.parse(m), b = JSON.parse(d);
const bad = [];
if (a.prompt_tokens !== b.prompt_tokens) bad.push(`prompt tokens ${a.prompt_tokens} (meshinfer) and ${b.prompt_tokens} (dllama)`);
for (const [k, x] of [["meshinfer", a], ["dllama", b]]) if (x.completion_tokens !== Number(n)) bad.push(`${k} gave ${x.completion_tokens} tokens, not ${n}`);
let same = 0;
while (same < a.text.length && a.text[same] === b.text[same]) same++;
// fp32 sums in another order: a near tie between two tokens may go either way late in a long text
if (same < a.text.length / 2) bad.push(`the texts agree on ${same} of ${a.text.length} characters only`);
if (bad.length) { console.error(bad.join("; ") + `\nmeshinfer: ${JSON.stringify(a.text)}\ndllama: ${JSON.stringify(b.text)}`); process.exit(1); }
console.error(`check: ${a.prompt_tokens} prompt tokens, ${n} tokens from both, the texts the same for ${same} of ${a.text.length} characters`);' \
    "${chk[meshinfer]}" "${chk[dllama]}" "$maxtok" || fail "the servers do not answer alike (see above)"
printf '{"meshinfer": %s, "dllama": %s}\n' "${chk[meshinfer]}" "${chk[dllama]}" > "$out/check-text.json"

# ------------------------------------------------------------------ the rounds
rows="$out/rows.jsonl"; : > "$rows"
turn() { # turn SERVER NODES ROUND: start, one untimed request, the timed ones, stop
    local s=$1 n=$2 r=$3 j
    start "$s" "$n" "$logs/r$r-$s-$n.log"
    node "$root/jobs/lib/serve_one.js" "$url" "$(kind_of "$s")" "$(text_of "$s")" "$maxtok" "$maxtok" 1 > /dev/null ||
        { stop_all; fail "$s: the untimed request failed"; }
    j=$(node "$root/jobs/lib/serve_one.js" "$url" "$(kind_of "$s")" "$(text_of "$s")" "$maxtok" "$maxtok" "$nreq") ||
        { stop_all; fail "$s: a timed request failed"; }
    stop_all
    echo "{\"server\": \"$s\", \"nodes\": $n, \"round\": $r, \"result\": $j}" >> "$rows"
}
for ((r = 1; r <= rounds; r++)); do
    order=(meshinfer dllama); ((r % 2)) || order=(dllama meshinfer)
    for n in 1 2; do
        for s in "${order[@]}"; do
            say "round $r/$rounds: $s, $n node(s)"
            if [[ -n $lock ]]; then
                exec {fd}> "$lock"; flock "$fd"; turn "$s" "$n" "$r"; flock -u "$fd"; exec {fd}>&-
            else turn "$s" "$n" "$r"; fi
        done
    done
done

node "$root/jobs/lib/serve_reference_table.js" "$rows" "$out" "$maxtok" "$planner" "$(commit_of "$dllama")" \
    "$(cat "$out/check-text.json")"
say "written: results/serve_reference/summary.md, summary.csv, rows.jsonl"
