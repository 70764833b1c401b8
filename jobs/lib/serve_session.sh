# shellcheck shell=bash
# batch_throughput.sh --http: one `meshinfer serve` and its rounds of clients. Sourced after the
# script's options are checked; uses its bin, model, out, rows, rounds, B, tokens, perclient, lock,
# and its cluster_of, skip_row, say, fail.
#   serve_session WHERE NP PLANNER   start the server (WHERE local: this machine, 1 rank; testbed:
#                                    jobs/testbed/hosts.sh on the first NP devices of the cluster),
#                                    run every round, append a JSON line per (round, clients) to
#                                    rows.jsonl, stop it with SIGTERM to rank 0 (a drain: every rank
#                                    must exit 0); with --lock all of it under flock.
# The lock's descriptor (9) is closed in every process started, so that nothing left running after
# a session could hold the lock.

session_body() {
    local where=$1 np=$2 pl=$3 tmp c rc=0 maxb=0 b
    for b in "${B[@]}"; do ((b > maxb)) && maxb=$b; done
    tmp=$(mktemp -d)
    local log="$tmp/log" launcher=""
    # (a failure anywhere stops the server first: hosts.sh removes its hosts on SIGTERM)
    trap '[[ -n $launcher ]] && kill -TERM "$launcher" 2> /dev/null && wait "$launcher" 2> /dev/null; rm -rf "$tmp"' EXIT
    local args=(serve -m "$model" --planner "$pl" --port 0 --pid-file "$tmp/pid" --max-batch "$maxb"
                --max-tokens "$tokens")
    say "$where, $np rank(s), $pl: starting meshinfer serve --max-batch $maxb..."
    if [[ $where == local ]]; then
        "$bin" "${args[@]}" --host 127.0.0.1 2> "$log" 9>&- &
    else
        c=$(cluster_of "$np")
        # rank 0 listens on every address of its host; this machine reaches it over the bridge
        MESHINFER_BIN="$bin" "$root/jobs/testbed/hosts.sh" --cluster "$c" --timeout 7200 -- "${args[@]}" \
            --cluster "$c" --host 0.0.0.0 2> "$log" 9>&- &
    fi
    launcher=$!
    for _ in $(seq 3000); do
        grep -q "listening on" "$log" 2> /dev/null && [[ -s $tmp/pid ]] && break
        kill -0 "$launcher" 2> /dev/null || break
        sleep 0.1
    done
    if ! grep -q "listening on" "$log" || [[ ! -s $tmp/pid ]]; then
        rc=0
        wait "$launcher" || rc=$?
        launcher=""
        [[ $pl == somegather ]] && skip_row "$where" "$np" "$pl" "${B[-1]}" "$log" && return 0
        fail "the server ($where, $np ranks, $pl) did not start: $(grep -v '^hosts:' "$log" | tail -1)"
    fi
    local port host rank0 micro url
    port=$(grep -o "listening on http://[^ ]*" "$log" | head -1 | grep -o "[0-9]*$")
    host=127.0.0.1
    if [[ $where != local ]]; then
        # hosts.sh's line names the testbed's subnet; rank 0 is its first host (.1)
        host=$(grep -o "on 10\.213\.[0-9]*\.0/24" "$log" | head -1 | grep -o "10\.213\.[0-9]*")
        [[ -n $host ]] || fail "hosts.sh named no subnet: $(head -1 "$log")"
        host+=".1"
    fi
    url="http://$host:$port"
    rank0=$(cat "$tmp/pid")
    micro=$(grep -o "decode passes in [0-9]*" "$log" | grep -o "[0-9]*$" || echo 1)
    # one request first: buffers and the KV cache touched once, connections made
    local code
    code=$(curl -s -o /dev/null -m 300 -w "%{http_code}" --data-binary '{"prompt": "Once upon a time", "max_tokens": 8}' \
           "$url/v1/completions" 9>&-) || true
    [[ $code == 200 ]] || fail "the warm-up request to $url got ${code:-no answer}: $(tail -1 "$log")"
    local session r C j order
    session=$(date +%s%N)
    for ((r = 1; r <= rounds; r++)); do
        order=(1 "${B[@]}")
        if ((r % 2 == 0)); then
            local rev=()
            for ((k = ${#order[@]} - 1; k >= 0; k--)); do rev+=("${order[$k]}"); done
            order=("${rev[@]}")
        fi
        for C in "${order[@]}"; do
            say "$where, $np rank(s), $pl, round $r/$rounds: $C client(s), $((C * perclient)) requests of $tokens tokens"
            j=$(timeout 3600 node "$root/jobs/lib/serve_load.js" "$url" $((C * perclient)) "$C" 100 0 "$tokens" "$tokens" 1 \
                9>&-) || fail "the clients failed ($C clients on $url): $(tail -1 "$log")"
            node -e 'const j = JSON.parse(process.argv[1]); const bad = Object.keys(j.status).filter(s => s !== "200");
                if (bad.length) { console.error(`statuses ${JSON.stringify(j.status)}`); process.exit(1); }' "$j" ||
                fail "not every request got 200 ($C clients, $where $np ranks $pl)"
            echo "{\"where\": \"$where\", \"planner\": \"$pl\", \"n_ranks\": $np, \"clients\": $C, \"round\": $r," \
                 "\"session\": \"$session\", \"micro_batches\": $micro, \"max_batch\": $maxb, \"result\": $j}" >> "$rows"
        done
    done
    kill -TERM "$rank0"
    rc=0
    wait "$launcher" || rc=$?
    launcher=""
    ((rc == 0)) || fail "the server ($where, $np ranks, $pl) exited $rc after SIGTERM: $(grep -v '^hosts:' "$log" | tail -1)"
    trap - EXIT
    rm -rf "$tmp"
}

serve_session() {
    if [[ -n $lock ]]; then
        (flock 9 && session_body "$@") 9>> "$lock" || exit $?
    else
        (session_body "$@") || exit $?
    fi
}
