#!/usr/bin/env bash
# The hosts testbed (jobs/testbed/hosts.sh): three hosts, each its own
# network namespace, address, hostname, CPU cgroup and shaped link, launched
# by mpirun from a hostfile through the rsh launcher. Checks that
#   - a 3-host generation gives the one-rank tokens (greedy head-level and
#     somegather), with every rank on its own host;
#   - every link's latency, measured by `meshinfer calibrate` (a ping-pong per
#     pair), is within 20% of the configured (delay_a + delay_b) / 2 one way,
#     plus at most 1 ms that the emulator and the hosts' stacks add;
#   - the per-host statistics file counts each host's CPU time and link bytes;
#   - nothing is left behind (namespaces, bridge, /etc/hosts lines, cgroups,
#     emulators, state) after a run, after SIGTERM mid-run, after --timeout
#     (exit 124), and after SIGKILL (the next run removes it, also when part of
#     it is gone already);
#   - two testbeds at once take different subnets and both give the text;
#   - bad input gives one line and exit 2, with nothing made: fewer hosts than
#     ranks, a host name that does not resolve, interface selections that
#     match no address (MPI's and the control channel's), and with the check
#     off meshinfer's own line from every rank instead of Open MPI's abort.
# Skipped (exit 77) without root, network namespaces or cgroup-v1 cpu/cpuacct.
# usage: hosts_check.sh MESHINFER MODEL
set -uo pipefail
mi=${1:?usage: hosts_check.sh MESHINFER MODEL}; model=${2:?}
export MESHINFER_BIN="$mi"
root="$(cd "$(dirname "$0")/.." && pwd)"
[[ $(id -u) -eq 0 && -w /sys/fs/cgroup/cpu && -w /sys/fs/cgroup/cpuacct ]] ||
    { echo "skip: needs root and cgroup-v1 cpu and cpuacct"; exit 77; }
ip netns add mi-probe-$$ 2> /dev/null && ip netns del mi-probe-$$ || { echo "skip: cannot make network namespaces"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
json() { node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1])); console.log(eval(process.argv[2]))' "$@"; }
hosts_sum() { md5sum < /etc/hosts; }
# what is left of any hosts testbed: namespaces, bridges, cgroups, emulators, state, /etc/hosts lines
leftovers() {
    echo "netns=$(ip netns list | grep -c '^mi[0-9]*-')" \
         "bridges=$(ip -o link show type bridge | grep -c ': mi[0-9]*br')" \
         "cgroups=$(ls /sys/fs/cgroup/cpu /sys/fs/cgroup/cpuacct | grep -c '^mi[0-9]*-')" \
         "netem=$(pgrep -c -r R,S,D mi_netem || true)" "state=$(ls /run/meshinfer-hosts 2>/dev/null | grep -c '^mi')" \
         "etc_hosts=$(grep -c 'meshinfer-hosts' /etc/hosts)"
}
clean="netns=0 bridges=0 cgroups=0 netem=0 state=0 etc_hosts=0"
before=$(leftovers)
[[ $before == "$clean" ]] || { echo "FAIL: hosts testbed state before the test: $before (another run going on?)"; exit 1; }
etc0=$(hosts_sum)

# the test's cluster: delays of 5, 8 and 12 ms on what each host sends (one way between
# two hosts 6.5 to 10 ms on average); whole cores but one, so the latency measured is
# the links' (the emulator and this VM's network stack add 0.2-0.9 ms)
cat > "$tmp/c3.json" << 'EOF'
{"description": "hosts test: three hosts, their own delays, one with a bandwidth limit",
 "devices": [
  {"name": "ctl", "mem_mb": 500, "emulate": {"delay_ms": 5, "jitter_ms": 0.5}},
  {"name": "w1", "mem_mb": 500, "emulate": {"delay_ms": 8, "jitter_ms": 0.8, "rate_mbit": 100}},
  {"name": "w2", "mem_mb": 500, "emulate": {"delay_ms": 12, "jitter_ms": 1, "cpu_pct": 80}}]}
EOF
prompt="Once upon a time"
"$mi" generate -m "$model" -p "$prompt" -n 16 --json > "$tmp/one.json" 2>/dev/null
want=$(json "$tmp/one.json" 'j.tokens.join(" ")')

for p in greedy somegather; do
    "$root/jobs/testbed/hosts.sh" --cluster "$tmp/c3.json" --stats "$tmp/st-$p.json" --timeout 240 -- \
        generate -m "$model" -p "$prompt" -n 16 --planner $p --cluster "$tmp/c3.json" --json > "$tmp/$p.json" 2> "$tmp/$p.err"
    rc=$?
    check "$p on 3 hosts exits 0" "[[ $rc == 0 ]]" || tail -5 "$tmp/$p.err"
    check "$p on 3 hosts: the one-rank tokens" "[[ -n \"\$want\" && \"\$(json '$tmp/$p.json' 'j.tokens.join(\" \")')\" == \"\$want\" ]]"
done
check "statistics: every host computed and sent bytes on its own link" \
    "json '$tmp/st-greedy.json' 'j.hosts.every(h => h.cpu_s > 0.05 && h.sent_bytes > 10000 && h.received_bytes > 10000) ? 1 : 0' | grep -qx 1"
check "statistics: ranks 1 and 2 received what their rank-0 link counted (bytes within 2x of meshinfer's count)" \
    "node -e 'const f = p => JSON.parse(require(\"fs\").readFileSync(p)); const s = f(\"$tmp/st-greedy.json\"), j = f(\"$tmp/greedy.json\");
      const ok = [1, 2].every(r => { const m = j.ranks[r].bytes_recv, w = s.hosts[r].received_bytes; return w >= m && w < 2 * m + 200000; });
      process.exit(ok ? 0 : 1)'"
check "nothing left after the runs ($(leftovers))" "[[ \"\$(leftovers)\" == '$clean' && \"\$(hosts_sum)\" == '$etc0' ]]"

# every link's latency against its configuration
"$root/jobs/testbed/hosts.sh" --cluster "$tmp/c3.json" --timeout 240 -- \
    calibrate --seconds 0.001 --link-bytes 65536 -o "$tmp/cal.json" > "$tmp/cal.out" 2> "$tmp/cal.err"
check "calibrate on 3 hosts exits 0" "[[ $? == 0 ]]" || tail -5 "$tmp/cal.err"
res=$(node -e '
  const c = JSON.parse(require("fs").readFileSync(process.argv[1])), m = JSON.parse(require("fs").readFileSync(process.argv[2]));
  const d = c.devices.map(x => x.emulate.delay_ms), out = [];
  for (let a = 0; a < 3; a++) for (let b = a + 1; b < 3; b++) {
    const want = (d[a] + d[b]) / 2, got = m.links.latency_ms[a][b];
    /* 20% either way, and up to 1 ms more: what the emulator and the network stacks of two hosts add
     * to a message one way (0.4-1.3 ms measured here; it weighs most on the shortest link) */
    out.push(`${a}-${b}:${got.toFixed(2)}/${want}:${got >= 0.8 * want && got <= 1.2 * want + 1 ? "in" : "OUT"}`);
  }
  console.log(out.join(" "))' "$tmp/c3.json" "$tmp/cal.json" 2>&1)
check "every link's one-way latency within 20% (+1 ms of the emulator's own) of (delay_a + delay_b) / 2 (measured/configured ms: $res)" \
    "[[ '$res' == *in*in*in* && '$res' != *OUT* ]]"
check "calibrate names each device by its own host" "[[ \$(json '$tmp/cal.json' 'j.devices.map(d => d.host).join(\" \")') =~ ^mi[0-9]+-0\ mi[0-9]+-1\ mi[0-9]+-2$ ]]"

# two testbeds at once: different subnets, both right
for k in 1 2; do
    "$root/jobs/testbed/hosts.sh" --cluster "$tmp/c3.json" --ranks 2 --timeout 240 -- \
        generate -m "$model" -p "$prompt" -n 16 --planner layerwise --json > "$tmp/par$k.json" 2> "$tmp/par$k.err" &
done
wait
nets=$(sed -n 's/.* on \(10\.213\.[0-9]*\.0\/24\).*/\1/p' "$tmp/par1.err" "$tmp/par2.err" | sort -u | wc -l)
check "two testbeds at once: two subnets ($nets)" "[[ $nets == 2 ]]"
for k in 1 2; do
    check "two testbeds at once: run $k gives the one-rank tokens" "[[ \"\$(json '$tmp/par$k.json' 'j.tokens.join(\" \")' 2>/dev/null)\" == \"\$want\" ]]" ||
        tail -3 "$tmp/par$k.err"
done

# long_run LOG SECONDS: a long generation in the background (pid in $pid), SECONDS after its hosts are up
long_run() {
    "$root/jobs/testbed/hosts.sh" --cluster "$tmp/c3.json" -- generate -m "$model" -n 250 --ignore-eos --planner greedy \
        > /dev/null 2> "$1" &
    pid=$!
    for _ in $(seq 100); do grep -q "rank(s) on" "$1" && break; sleep 0.1; done
    sleep "$2"
}

# SIGTERM mid-run: stopped, everything removed
long_run "$tmp/term.err" 2
kill -TERM $pid
wait $pid
rc=$?
check "SIGTERM mid-run: exit 143 ($rc)" "[[ $rc == 143 ]]"
check "SIGTERM mid-run: nothing left ($(leftovers))" "[[ \"\$(leftovers)\" == '$clean' && \"\$(hosts_sum)\" == '$etc0' ]]"

# --timeout: stopped, exit 124, everything removed
"$root/jobs/testbed/hosts.sh" --cluster "$tmp/c3.json" --timeout 3 -- generate -m "$model" -n 250 --ignore-eos --planner greedy \
    > /dev/null 2> "$tmp/to.err"
rc=$?
check "--timeout 3 on a longer run: exit 124 ($rc) and its line" "[[ $rc == 124 ]] && grep -q 'took more than --timeout 3 s' '$tmp/to.err'"
check "--timeout: nothing left ($(leftovers))" "[[ \"\$(leftovers)\" == '$clean' && \"\$(hosts_sum)\" == '$etc0' ]]"

# SIGKILL: no clean-up is possible; the next run removes what is left and works,
# also when part of it is gone already (a namespace deleted takes its veth along)
long_run "$tmp/kill.err" 1
kill -KILL $pid
wait $pid 2> /dev/null
check "SIGKILL: the run's hosts are still there (nothing could remove them)" "[[ \"\$(leftovers)\" != '$clean' ]]"
ns0=$(ip netns list | grep -o '^mi[0-9]*-0' | head -1)
[[ -n $ns0 ]] && ip netns del "$ns0"
"$root/jobs/testbed/hosts.sh" --cluster "$tmp/c3.json" --ranks 2 --timeout 240 -- \
    generate -m "$model" -p "$prompt" -n 16 --planner layerwise --json > "$tmp/next.json" 2> "$tmp/next.err"
check "the next run says it removed them" "grep -q 'left behind' '$tmp/next.err'"
check "the next run gives the one-rank tokens" "[[ \"\$(json '$tmp/next.json' 'j.tokens.join(\" \")' 2>/dev/null)\" == \"\$want\" ]]"
sleep 0.5 # the killed run's mpirun, orphaned, may still be exiting
check "after SIGKILL and the next run: nothing left ($(leftovers))" "[[ \"\$(leftovers)\" == '$clean' && \"\$(hosts_sum)\" == '$etc0' ]]"

# bad input: one line naming the problem and the fix, exit 2, nothing made
bad() { # NAME EXPECTED_PATTERN ARGS...
    local name=$1 pat=$2; shift 2
    timeout 120 "$root/jobs/testbed/hosts.sh" "$@" > "$tmp/bad.out" 2> "$tmp/bad.err"
    local rc=$? lines
    lines=$(grep -c . "$tmp/bad.err")
    check "bad input, $name: exit 2, one line ($(head -c 160 "$tmp/bad.err"))" \
        "[[ $rc == 2 && $lines == 1 ]] && grep -q -- \"$pat\" '$tmp/bad.err'"
    check "bad input, $name: nothing left" "[[ \"\$(leftovers)\" == '$clean' && \"\$(hosts_sum)\" == '$etc0' ]]"
}
gen=(-- generate -m "$model" -n 4)
bad "fewer hosts than ranks" "gives 3 host(s), fewer than the 5 ranks" --cluster "$tmp/c3.json" --ranks 5 "${gen[@]}"
printf 'ctl\nw1\npi-w9.local slots=1\n' > "$tmp/hf"
bad "a host that does not resolve" "host 'pi-w9.local' does not resolve" --cluster "$tmp/c3.json" --hostfile "$tmp/hf" "${gen[@]}"
bad "btl_tcp_if_include matching no address" "btl-if 'wlan0' matches no address of host" --cluster "$tmp/c3.json" --btl-if wlan0 "${gen[@]}"
bad "btl_tcp_if_include on another subnet" "matches no address" --cluster "$tmp/c3.json" --btl-if 192.168.77.0/24 "${gen[@]}"
bad "oob_tcp_if_include the hosts cannot reach" "hosts cannot reach" --cluster "$tmp/c3.json" --oob-if eth0 "${gen[@]}"
bad "btl_tcp_if_include with the loopback interface" "selects a loopback address" --cluster "$tmp/c3.json" --btl-if eth0,lo "${gen[@]}"
sum3=$(md5sum < "$tmp/c3.json")
bad "--stats naming an input" "is an input of the run" --cluster "$tmp/c3.json" --stats "$tmp/../${tmp##*/}/c3.json" "${gen[@]}"
check "--stats naming an input: the cluster file is untouched" "[[ \"\$(md5sum < '$tmp/c3.json')\" == '$sum3' ]]"
printf '{"devices": [{"mem_mb": 10, "emulate": {"cpu_pct": 40, "delay": 5}}]}\n' > "$tmp/typo.json"
bad "an unknown emulate key" "unknown key 'delay'" --cluster "$tmp/typo.json" "${gen[@]}"
"$mi" plan --shape stories15M --cluster "$tmp/typo.json" > /dev/null 2> "$tmp/plan.err"
check "meshinfer refuses the same typo in the cluster file" "grep -q \"unknown key 'delay' in devices\\[0\\].emulate\" '$tmp/plan.err'"

# with the check off, meshinfer's own start-up probe names the fix on every rank (no hang)
timeout 120 "$root/jobs/testbed/hosts.sh" --cluster "$tmp/c3.json" --btl-if wlan0 --mca-check off --timeout 100 -- \
    generate -m "$model" -n 4 > /dev/null 2> "$tmp/probe.err"
rc=$?
check "check off, MPI interface matching nothing: exit non-zero ($rc), not the timeout" "[[ $rc != 0 && $rc != 124 ]] && ! grep -q 'took more than' '$tmp/probe.err'"
check "check off: every rank says which ranks it cannot reach and the MCA fix" \
    "[[ \$(grep -c 'meshinfer: error: rank [0-2] (host mi[0-9]*-[0-2]) cannot exchange messages.*btl_tcp_if_include' '$tmp/probe.err') == 3 ]]"
check "nothing left at the end ($(leftovers))" "[[ \"\$(leftovers)\" == '$clean' && \"\$(hosts_sum)\" == '$etc0' ]]"
exit $fail
