# shellcheck shell=bash
# Starting and stopping `meshinfer serve` for the job scripts (sourced after common.sh; uses bin, root,
# say, fail):
#   serve_start WHERE NP LOG PIDFILE CLUSTER -- SERVE_ARGS...
#       WHERE local: one rank, no launcher; mpi: NP ranks under mpirun over shared memory; testbed:
#       jobs/testbed/hosts.sh on CLUSTER's devices (a cluster file of NP devices), rank 0 listening
#       on its host's address, which this machine reaches over the testbed's bridge. Waits until the
#       server listens (the start line in LOG, rank 0's pid in PIDFILE). Sets serve_launcher (its pid:
#       the server, mpirun or hosts.sh), serve_url, serve_rank0 and serve_micro (the micro-batches of
#       a decode pass); returns 1 when it did not start (the launcher reaped; LOG says why).
#   serve_stop    SIGTERM to rank 0 (a drain), then the launcher's exit status (every rank exits 0)
#   serve_session WHERE NP PLANNER   batch_throughput.sh --http: one server and its rounds of clients,
#       a JSON line per (round, clients) into rows.jsonl (uses the script's model, out, rows, rounds, B,
#       tokens, perclient, lock, cluster_of, skip_row); with --lock all of it under flock. The lock's
#       descriptor (9) is closed in every process started, so that nothing left running after a
#       session could hold the lock.
serve_launcher="" serve_url="" serve_rank0="" serve_micro=1 session_tmp=""

serve_start() {
    local where=$1 np=$2 log=$3 pidfile=$4 cluster=$5 host=127.0.0.1 port
    shift 6
    case $where in
        local) "$bin" serve "$@" --host 127.0.0.1 --pid-file "$pidfile" 2> "$log" 9>&- & ;;
        mpi) mpi -np "$np" --mca btl self,vader "$bin" serve "$@" --host 127.0.0.1 --pid-file "$pidfile" 2> "$log" 9>&- & ;;
        testbed) MESHINFER_BIN="$bin" "$root/jobs/testbed/hosts.sh" --cluster "$cluster" --timeout 7200 -- serve "$@" \
                     --cluster "$cluster" --host 0.0.0.0 --pid-file "$pidfile" 2> "$log" 9>&- & ;;
        *) fail "serve_start: no place '$where'" ;;
    esac
    serve_launcher=$!
    for _ in $(seq 3000); do
        grep -q "listening on" "$log" 2> /dev/null && [[ -s $pidfile ]] && break
        kill -0 "$serve_launcher" 2> /dev/null || break
        sleep 0.1
    done
    if ! grep -q "listening on" "$log" || [[ ! -s $pidfile ]]; then
        kill -TERM "$serve_launcher" 2> /dev/null
        wait "$serve_launcher" 2> /dev/null
        serve_launcher=""
        return 1
    fi
    port=$(grep -o "listening on http://[^ ]*" "$log" | head -1 | grep -o "[0-9]*$")
    if [[ $where == testbed ]]; then
        # hosts.sh's line names the testbed's subnet; rank 0 is its first host (.1)
        host=$(grep -o "on 10\.213\.[0-9]*\.0/24" "$log" | head -1 | grep -o "10\.213\.[0-9]*") ||
            fail "hosts.sh named no subnet: $(head -1 "$log")"
        host+=".1"
    fi
    serve_url="http://$host:$port"
    serve_rank0=$(cat "$pidfile")
    serve_micro=$(grep -o "decode passes in [0-9]*" "$log" | grep -o "[0-9]*$" || echo 1)
}

serve_stop() {
    local rc=0
    kill -TERM "$serve_rank0"
    wait "$serve_launcher" || rc=$?
    serve_launcher=""
    return "$rc"
}

session_body() {
    local where=$1 np=$2 pl=$3 c="" maxb=0 b
    for b in "${B[@]}"; do ((b > maxb)) && maxb=$b; done
    # (globals: the trap runs at the subshell's exit, where this function's locals are gone)
    session_tmp=$(mktemp -d)
    local tmp=$session_tmp
    # (a failure anywhere stops the server first: hosts.sh removes its hosts on SIGTERM)
    trap '[[ -n $serve_launcher ]] && kill -TERM "$serve_launcher" 2> /dev/null && wait "$serve_launcher" 2> /dev/null; rm -rf "$session_tmp"' EXIT
    [[ $where == local ]] || c=$(cluster_of "$np")
    say "$where, $np rank(s), $pl: starting meshinfer serve --max-batch $maxb..."
    if ! serve_start "$where" "$np" "$tmp/log" "$tmp/pid" "$c" -- -m "$model" --planner "$pl" --port 0 \
            --max-batch "$maxb" --max-tokens "$tokens"; then
        [[ $pl == somegather ]] && skip_row "$where" "$np" "$pl" "${B[-1]}" "$tmp/log" && return 0
        fail "the server ($where, $np ranks, $pl) did not start: $(grep -v '^hosts:' "$tmp/log" | tail -1)"
    fi
    # one request first: buffers and the KV cache touched once, connections made
    local code
    code=$(curl -s -o /dev/null -m 300 -w "%{http_code}" --data-binary '{"prompt": "Once upon a time", "max_tokens": 8}' \
           "$serve_url/v1/completions" 9>&-) || true
    [[ $code == 200 ]] || fail "the warm-up request to $serve_url got ${code:-no answer}: $(tail -1 "$tmp/log")"
    local session r C j k order
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
            j=$(timeout 3600 node "$root/jobs/lib/serve_load.js" "$serve_url" $((C * perclient)) "$C" 100 0 "$tokens" "$tokens" 1 1 \
                9>&-) || fail "the clients failed ($C clients on $serve_url): $(tail -1 "$tmp/log")"
            node -e 'const j = JSON.parse(process.argv[1]); const bad = Object.keys(j.status).filter(s => s !== "200");
                if (bad.length) { console.error(`statuses ${JSON.stringify(j.status)}`); process.exit(1); }' "$j" ||
                fail "not every request got 200 ($C clients, $where $np ranks $pl)"
            echo "{\"where\": \"$where\", \"planner\": \"$pl\", \"n_ranks\": $np, \"clients\": $C, \"round\": $r," \
                 "\"session\": \"$session\", \"micro_batches\": $serve_micro, \"max_batch\": $maxb, \"result\": $j}" >> "$rows"
        done
    done
    serve_stop || fail "the server ($where, $np ranks, $pl) exited $? after SIGTERM: $(grep -v '^hosts:' "$tmp/log" | tail -1)"
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
