#!/usr/bin/env bash
# The emulated device testbed (jobs/testbed/testbed.sh) on a short run: the text is the
# one-rank text, the measured RTT reflects the added delay, a lossy link still
# gives the same text (TCP retransmits), a token waits for as many link delays
# as its programs' dependencies need (layer-wise 3, somegather 27 on 3 ranks:
# TPOT's growth per ms of delay, within 10%) and the calibrated cost model
# predicts TPOT within 20%, a slow medium's messages are lowered to fp16 for
# some layers only, the last first (Voltron communication scaling per
# layer), and everything the testbed creates (cgroups,
# iptables rules, mi_netem, TCP autocorking turned off) is undone afterwards,
# also when the script is sent SIGTERM mid-run. Skipped (exit 77) without root or a writable cgroup-v1
# cpu controller.
# usage: testbed_check.sh MESHINFER MODEL
set -uo pipefail
mi=${1:?usage: testbed_check.sh MESHINFER MODEL}; model=${2:?}
export MESHINFER_BIN="$mi" # the testbed runs the binary under test, not whatever build/ holds
root="$(cd "$(dirname "$0")/.." && pwd)"
# (testbed.sh installs iptables and libnetfilter-queue-dev itself when missing)
[[ $(id -u) -eq 0 && -w /sys/fs/cgroup/cpu ]] || { echo "skip: needs root and cgroup-v1 cpu"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
port=47100   # away from the default 46000, so a sweep may run meanwhile
# what is left of the testbed whose start-up line is in file $1
leftovers() {
    local tag queue
    tag=$(sed -n 's/.*(cgroups \(meshinfer-testbed-[0-9]*\)-rank.*/\1/p' "$1")
    queue=$(sed -n 's/.*NFQUEUE \([0-9]*\) on ports.*/\1/p' "$1")
    [[ -n $tag && -n $queue ]] || { echo "no start-up line in $1"; return; }
    echo "$(iptables -S OUTPUT | grep -c -- "$port:$((port + 99)) .*NFQUEUE --queue-num $queue") $(ls /sys/fs/cgroup/cpu | grep -c "$tag-") $(pgrep -fc "mi_netem --queue $queue " || true)"
}
json() { node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1])); console.log(eval(process.argv[2]))' "$@"; }
"$mi" generate -m "$model" -n 12 --json > "$tmp/one.json" 2>/dev/null
want=$(json "$tmp/one.json" 'j.tokens.join(" ")')
want_text=$("$mi" generate -m "$model" -n 12 2>/dev/null)

"$root/jobs/testbed/testbed.sh" --ranks 3 --cpu-pct 60 --delay-ms 2 --jitter-ms 0.4 --port $port -- \
    generate -m "$model" -n 12 --planner greedy --json > "$tmp/a.json" 2> "$tmp/a.err"
rc=$?
check "testbed run exits 0" "[[ $rc == 0 ]]" || tail -5 "$tmp/a.err"
check "same tokens as one rank" "[[ -n \"\$want\" && \"\$(json '$tmp/a.json' 'j.tokens.join(\" \")')\" == \"\$want\" ]]"
rtt=$(json "$tmp/a.json" 'Math.min(...j.rtt_ms.slice(1))')
check "measured RTT $rtt ms is at least the added 2 x (2 - 0.4) ms and under 40 ms" \
    "awk 'BEGIN {exit !($rtt >= 3.2 && $rtt < 40)}'"
check "no cgroup, iptables rule or mi_netem left after a run" "[[ \"\$(leftovers '$tmp/a.err')\" == '0 0 0' ]]"

# critical path: the TPOT's slope over the link delay counts the delays a token waits for;
# the calibrated prediction is checked where the links dominate (8 ms): its compute
# part comes from a streaming rate measured past the caches, so it over-estimates
# shards that stay cache-resident (layerwise at 2 ms: +16%)
autocork=$(sysctl -n net.ipv4.tcp_autocorking 2>/dev/null)
for p in layerwise somegather; do
    for d in 2 8; do
        "$root/jobs/testbed/testbed.sh" --ranks 3 --cpu-pct 60 --delay-ms $d --jitter-ms 0 --port $port -- \
            generate -m "$model" -n 24 --planner $p --json > "$tmp/cp-$p-$d.json" 2> "$tmp/cp.err" || tail -3 "$tmp/cp.err"
    done
    # the prediction within 20%: CI runs this in the gcov-instrumented build, whose counters slow the
# control code between the kernels that the streaming rate does not see (layer-wise: -15% there once,
# within a few percent in the plain build);
# medians of the steps: one step a neighbour on this VM stretches must not tilt a 24-step mean;
    # within 10% and half a delay: the median of one 24-step run moves by about 3 ms here (layer-wise
    # measured 3.36 delays against its 3 in one of five runs), a miscount by one delay still fails
    res=$(node -e 'const f = (p) => JSON.parse(require("fs").readFileSync(p));
      const med = (j) => { const t = [...j.scaling.token_ms].sort((x, y) => x - y); return t[t.length >> 1]; };
      const a = f(process.argv[1]), b = f(process.argv[2]);
      const slope = (med(b) - med(a)) / 6, want = a.critical_path_delays, err = b.calibrated_token_ms / med(b) - 1;
      console.log(slope.toFixed(2), want, (100 * err).toFixed(0),
                  Math.abs(slope - want) <= 0.1 * want + 0.5 && Math.abs(err) <= 0.2 ? "ok" : "BAD")' \
        "$tmp/cp-$p-2.json" "$tmp/cp-$p-8.json" 2>&1)
    check "$p: delays per token measured/programs, calibrated prediction error %: $res" "[[ '$res' == *ok ]]"
done
check "TCP autocorking restored after the runs" "[[ \"\$(sysctl -n net.ipv4.tcp_autocorking 2>/dev/null)\" == '$autocork' ]]"

"$root/jobs/testbed/testbed.sh" --ranks 3 --cpu-pct 60 --delay-ms 1 --loss-pct 3 --port $port -- \
    generate -m "$model" -n 12 --planner roundrobin > "$tmp/b.txt" 2> "$tmp/b.err"
rc=$?
check "3% packet loss: exits 0 with the same text" "[[ $rc == 0 && -n \"\$want_text\" && \"\$(cat '$tmp/b.txt')\" == \"\$want_text\" ]]"
check "mi_netem dropped packets" "grep -q 'dropped' '$tmp/b.err' && ! grep -q ' 0 dropped' '$tmp/b.err'"

"$root/jobs/testbed/testbed.sh" --ranks 3 --cpu-pct 30 --delay-ms 5 --port $port -- \
    generate -m "$model" -n 240 --ignore-eos --planner greedy > /dev/null 2> "$tmp/c.err" &
tb=$!
for _ in $(seq 150); do grep -q "^testbed: 3 ranks" "$tmp/c.err" && break; sleep 0.2; done
sleep 2
check "testbed started: 2 iptables rules, 3 cgroups, mi_netem" "[[ \"\$(leftovers '$tmp/c.err')\" == '2 3 1' ]]"
kill -TERM "$tb"; wait "$tb"; rc=$?
sleep 1
check "SIGTERM: exit 130 with a message" "[[ $rc == 130 ]] && grep -q 'interrupted' '$tmp/c.err'"
check "SIGTERM: no meshinfer rank, cgroup, iptables rule or mi_netem left" \
    "[[ \"\$(leftovers '$tmp/c.err')\" == '0 0 0' && \$(pgrep -fc 'meshinfer generate.*-n 240' || true) == 0 ]]"

# killed outright, a testbed cannot clean up: the next run removes what it left
reserved=$(sysctl -n net.ipv4.ip_local_reserved_ports)
"$root/jobs/testbed/testbed.sh" --ranks 2 --delay-ms 5 --port $port -- \
    generate -m "$model" -n 240 --ignore-eos > /dev/null 2> "$tmp/k.err" &
tb=$!
for _ in $(seq 150); do grep -q "^testbed: 2 ranks" "$tmp/k.err" && break; sleep 0.2; done
check "while it runs, the shaped ports are reserved from other programs' connections" \
    "sysctl -n net.ipv4.ip_local_reserved_ports | grep -q '$port-$((port + 99))'"
kill -KILL "$tb"; wait "$tb" 2>/dev/null
check "SIGKILL: its 2 iptables rules and 2 cgroups stay behind" "[[ \"\$(leftovers '$tmp/k.err')\" == '2 2 '* ]]"
"$root/jobs/testbed/testbed.sh" --ranks 2 --delay-ms 1 --port $port -- generate -m "$model" -n 4 > /dev/null 2> "$tmp/l.err"
rc=$?
check "the next run exits 0 and says it removed them" "[[ $rc == 0 ]] && grep -q 'removed what testbed $tb left behind' '$tmp/l.err'"
sleep 1
check "nothing of either run left; reserved ports and autocorking restored" \
    "[[ \"\$(leftovers '$tmp/k.err') \$(leftovers '$tmp/l.err')\" == '0 0 0 0 0 0' && \"\$(sysctl -n net.ipv4.ip_local_reserved_ports)\" == '$reserved' && \"\$(sysctl -n net.ipv4.tcp_autocorking)\" == '$autocork' && \$(pgrep -fc 'meshinfer generate.*-n 240' || true) == 0 ]]"

# Voltron communication scaling per layer: on a 2 Mbit/s medium a small model's tp messages are most
# of its step (96 ms, layer messages 90% of the bytes); a target 16% under that is met by lowering the
# messages of some layers to fp16, the last first (no importance file), not every message
"$mi" synth --shape tiny-gqa --out "$tmp/gqa.h5" > /dev/null 2>&1
"$root/jobs/testbed/testbed.sh" --ranks 3 --cpu-pct 100 --delay-ms 0 --jitter-ms 0 --rate-mbit 2 --port $port -- \
    generate -m "$tmp/gqa.h5" --planner tp -n 100 --ignore-eos --tpot-ms 80 --json > "$tmp/w.json" 2> "$tmp/w.err"
first=$(json "$tmp/w.json" 'j.scaling.decisions.length ? j.scaling.decisions[0].kind + ": " + j.scaling.decisions[0].change : "none"' 2>&1)
check "per-layer wire: the first decision lowers the last layers' messages only ($first)" \
    "[[ '$first' =~ ^wire:\ messages\ of\ layers\ 3(\ 2)?(\ 1)?\ -\>\ fp16$ ]]"

"$root/jobs/testbed/testbed.sh" --ranks 3 --bogus 1 -- info > /dev/null 2> "$tmp/d.err"; rc=$?
check "unknown option: exit 2 naming it" "[[ $rc == 2 ]] && grep -q 'bogus' '$tmp/d.err'"
exit $fail
