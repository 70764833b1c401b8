#!/usr/bin/env bash
# Emulated device testbed (HeadSplit's five-Pi experiment on one machine): runs
# one MPI job where every rank lives in its own CPU-quota cgroup (a device's
# compute budget) and every TCP link between ranks gets delay, jitter and loss
# (mi_netem on an NFQUEUE, since this kernel has no tc netem). Everything it
# creates (cgroups, iptables rules, the emulator process) is removed on exit,
# also when interrupted; what a testbed killed outright (SIGKILL) left behind
# is removed by the next run (state in /run/meshinfer-testbed). The shaped
# port range is reserved during the run (net.ipv4.ip_local_reserved_ports), so
# no other program's connection is shaped or caught by it. TCP autocorking is off during the run (restored
# after): Linux holds a small segment back while the socket's previous one is
# still queued in the host, and NFQUEUE keeps it queued for the whole delay,
# so every second message sent back to back on a link arrived one delay late
# (two 1 KB sends 5 ms apart instead of together); a real link drains the
# queue in microseconds.
#
# usage: jobs/testbed/testbed.sh [options] -- MESHINFER_ARGS...
#   --ranks N          ranks (default 5: a controller and 4 workers)
#   --cpu-pct P[,P...] CPU quota of each rank, % of one core (default 40); a
#                      list gives rank 0, 1, ... their own (the last repeats):
#                      a heterogeneous cluster, e.g. 100,50,25,25
#   --slowdown S[,S...] make rank 0, 1, ... a CPU S times slower (default 1; the
#                      last repeats): every compute op sleeps S-1 times its own
#                      time after it (MESHINFER_SLOWDOWN). A CPU quota throttles
#                      sustained work only: a decode step's burst shorter than
#                      the quota runs at full speed, so quotas alone make slow
#                      devices fast at decoding; a slowdown slows both phases
#                      alike, as a slower CPU does, and keeps the cores free
#   --at T:link=D/R    at T seconds into the run, every link's delay becomes D ms
#                      and the medium's rate R Mbit/s (0: unlimited); repeatable
#   --at T:rank=K,slowdown=S  at T seconds, rank K becomes S times slower;
#                      repeatable (Voltron's runtime scaling: a link degrades,
#                      a device slows down, mid-run)
#   --cpu-period-ms T  quota period (default 5): a rank that used its share
#                      waits out the rest of the period, so long periods add
#                      stalls of up to T*(1-P/100) ms that a slower device
#                      would not have (MPI ranks poll while they wait)
#   --delay-ms D       one-way delay added to each packet (default 5: RTT about 10 ms)
#   --jitter-ms J      uniform jitter (default 1)
#   --loss-pct L       packet loss (default 0; TCP retransmits)
#   --rate-mbit R      one medium of R Mbit/s that every packet shares in turn,
#                      like a wireless channel (default 0: unlimited)
#   --port P           first TCP port of the ranks' links (default 46000)
#   --launcher         after --, a command that starts its own mpirun jobs on the
#                      testbed (e.g. jobs/testbed/resilient_generate.sh, which relaunches
#                      after a lost rank), instead of meshinfer's arguments: it
#                      gets MESHINFER_TESTBED_MPI (the mpirun options that put
#                      the links on the shaped ports; it adds mpi_yield_when_idle) and MESHINFER_TESTBED_WRAPPER
#                      (the command that puts rank R in its cgroup, to run the
#                      binary through); its jobs may have up to --ranks ranks
# environment: MESHINFER_BIN  the meshinfer binary to run (default build/meshinfer,
#                              built first)
# example:
#   jobs/testbed/testbed.sh -- generate -m models/cache/stories15M.h5 --planner greedy --speculate --json
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
fail_status=2
ranks=5 cpu=40 slowdown=1 period=5 changes=() delay=5 jitter=1 loss=0 rate=0 port=46000 launcher=0
while (($#)); do
    case "$1" in
        --ranks|--cpu-pct|--slowdown|--at|--cpu-period-ms|--delay-ms|--jitter-ms|--loss-pct|--rate-mbit|--port)
            need_value "$@" ;;&
        --ranks) ranks=$2; shift 2 ;;
        --cpu-pct) cpu=$2; shift 2 ;;
        --slowdown) slowdown=$2; shift 2 ;;
        --at) changes+=("$2"); shift 2 ;;
        --cpu-period-ms) period=$2; shift 2 ;;
        --delay-ms) delay=$2; shift 2 ;;
        --jitter-ms) jitter=$2; shift 2 ;;
        --loss-pct) loss=$2; shift 2 ;;
        --rate-mbit) rate=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --launcher) launcher=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        *) bad_option "$1" ;;
    esac
done
(($#)) || fail "give the meshinfer command after --"
if ((launcher)); then
    command -v "$1" > /dev/null || [[ -x "$1" ]] || fail "--launcher: '$1' is not a command"
fi
opt_int --ranks "$ranks" 1 256 # (meshinfer's MI_MAX_RANKS)
opt_int --cpu-period-ms "$period" 1 1000
# the links take ports P to P+99, and sysctl would refuse a reserved range past 65535 in its own words
opt_port --port "$port" 99
opt_ints --cpu-pct "$cpu" 1 100
opt_nums --slowdown "$slowdown" 1 1000
read -r -a cpus <<< "${cpu//,/ }"
read -r -a slows <<< "${slowdown//,/ }"
slow_of() { local i=$1; ((i < ${#slows[@]})) || i=$((${#slows[@]} - 1)); echo "${slows[$i]}"; }
for ch in "${changes[@]}"; do
    [[ $ch =~ ^[0-9]+([.][0-9]+)?:(link=[0-9]+([.][0-9]+)?/[0-9]+([.][0-9]+)?|rank=[0-9]+,slowdown=[0-9]+([.][0-9]+)?)$ ]] ||
        arg_fail "--at '$ch' is not T:link=DELAY_MS/RATE_MBIT or T:rank=K,slowdown=S"
done
# the quota of rank r (the list's last entry for ranks beyond it)
cpu_of() { local i=$1; ((i < ${#cpus[@]})) || i=$((${#cpus[@]} - 1)); echo "${cpus[$i]}"; }
opt_num --delay-ms "$delay" 0 60000
opt_num --jitter-ms "$jitter" 0 60000
opt_pct --loss-pct "$loss"
opt_num --rate-mbit "$rate" 0 1000000
for cpu in "${cpus[@]}"; do
    # the kernel's smallest quota is 1 ms
    ((cpu * period * 10 >= 1000)) || fail "--cpu-pct $cpu of a ${period} ms period is under the kernel's 1 ms minimum quota; use --cpu-period-ms $(( (100 + cpu - 1) / cpu ))"
done
((launcher)) || check_model_args "$@"
[[ $(id -u) -eq 0 ]] || { fail_status=1; fail "needs root (cgroups and iptables)"; }
meshinfer_bin
fail_status=1 # (what fails from here on is the machine, not the arguments)
# packages only when something is missing: the binaries are built once, not on every run
if ! command -v iptables > /dev/null; then
    . "$root/jobs/lib/packages.sh"
    ensure_packages testbed iptables
fi
netem_bin
cgroot=/sys/fs/cgroup/cpu
[[ -w "$cgroot" ]] || fail "$cgroot (cgroup v1 cpu controller) is not writable"

tag="meshinfer-testbed-$$"
queue=$(( ($$ % 60000) + 100 ))
netem_pid="" mpi_pid=""
# What a run changed is written down before it changes it, so that a testbed
# killed too hard to clean up (SIGKILL, a lost session) is cleaned up by the
# next one: its NFQUEUE rules, left without a reader, would drop every packet
# on those ports, hanging any program whose connection happens to use one.
statedir=/run/meshinfer-testbed
state="$statedir/$$.state"
save_state() {
    printf 's_tag=%q s_queue=%q s_port=%q s_ranks=%q s_autocork=%q s_reserved=%q s_netem=%q s_mpi=%q\n' \
        "$tag" "$queue" "$port" "$ranks" "$autocork" "$reserved" "$netem_pid" "$mpi_pid" > "$state.tmp" &&
        mv "$state.tmp" "$state"
}
# remove TAG QUEUE PORT RANKS AUTOCORK RESERVED NETEM_PID MPIRUN_PID
remove_testbed() {
    local tag=$1 queue=$2 port=$3 ranks=$4 autocork=$5 reserved=$6 netem=$7 mpi=$8 r g p
    [[ -n "$mpi" && "$(cat "/proc/$mpi/comm" 2>/dev/null)" == mpirun ]] && kill -KILL "$mpi" 2>/dev/null
    [[ -n "$netem" && "$(cat "/proc/$netem/comm" 2>/dev/null)" == mi_netem ]] && kill "$netem" 2>/dev/null
    for dir in dport sport; do
        while iptables -D OUTPUT -o lo -p tcp --$dir "$port:$((port + 99))" -j NFQUEUE --queue-num "$queue" 2>/dev/null; do :; done
    done
    [[ -n "$autocork" ]] && sysctl -qw net.ipv4.tcp_autocorking="$autocork" 2>/dev/null
    [[ "$reserved" != "-" ]] && sysctl -qw net.ipv4.ip_local_reserved_ports="$reserved" 2>/dev/null
    for ((r = 0; r < ranks; r++)); do
        g="$cgroot/$tag-rank$r"
        [[ -d "$g" ]] || continue
        # what is still in a rank's cgroup is that rank: killed, as hosts.sh does (moved out
        # alive, a rank whose mpirun was killed inside MPI_Init waits for it forever)
        while read -r p; do kill -KILL "$p" 2>/dev/null; done < "$g/cgroup.procs" 2>/dev/null
        for _ in 1 2 3 4 5 6 7 8 9 10; do [[ -n "$(cat "$g/cgroup.procs" 2>/dev/null)" ]] || break; sleep 0.1; done
        rmdir "$g" 2>/dev/null
    done
    return 0
}
mkdir -p "$statedir"
for f in "$statedir"/*.state; do
    [[ -f "$f" ]] || continue
    pid=${f##*/}; pid=${pid%.state}
    # (read whole, not piped into grep -q: under pipefail its early exit can
    # fail the pipeline, and a live testbed's rules would be taken for debris)
    cmd=$( { tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null || true)
    [[ $cmd == *testbed.sh* ]] && continue
    (set +eu; . "$f"; remove_testbed "$s_tag" "$s_queue" "$s_port" "$s_ranks" "$s_autocork" "$s_reserved" "$s_netem" "$s_mpi")
    rm -f "$f"
    echo "testbed: removed what testbed $pid left behind (it was killed before it could clean up)" >&2
done
# read after the clean-up above, which restores what a killed run changed
autocork=$(sysctl -n net.ipv4.tcp_autocorking 2>/dev/null || echo "")
reserved=$(sysctl -n net.ipv4.ip_local_reserved_ports 2>/dev/null || echo "-")
save_state
cleanup() {
    set +e
    [[ -n "$netem_pid" ]] && kill "$netem_pid" 2>/dev/null && wait "$netem_pid" 2>/dev/null
    netem_pid=""
    remove_testbed "$tag" "$queue" "$port" "$ranks" "$autocork" "$reserved" "" ""
    rm -f "$state"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for ((r = 0; r < ranks; r++)); do
    g="$cgroot/$tag-rank$r"
    mkdir "$g"
    echo $((period * 1000)) > "$g/cpu.cfs_period_us"
    echo $(($(cpu_of $r) * period * 10)) > "$g/cpu.cfs_quota_us"
done
[[ -n "$autocork" ]] && sysctl -qw net.ipv4.tcp_autocorking=0
# no other program's outgoing connection may take a port of the shaped range
[[ "$reserved" != "-" ]] && sysctl -qw net.ipv4.ip_local_reserved_ports="${reserved:+$reserved,}$port-$((port + 99))"
ctl="$(mktemp -d)"
trap 'cleanup; rm -rf "$ctl"' EXIT
for ((r = 0; r < ranks; r++)); do echo "$(slow_of $r)" > "$ctl/slow$r"; done
"$netem" --queue "$queue" --delay-ms "$delay" --jitter-ms "$jitter" --loss-pct "$loss" --rate-mbit "$rate" \
    --control "$ctl/link" &
netem_pid=$!
save_state
sleep 0.3
# both directions of every rank-to-rank TCP connection, each packet once
iptables -I OUTPUT -o lo -p tcp --dport "$port:$((port + 99))" -j NFQUEUE --queue-num "$queue"
iptables -I OUTPUT -o lo -p tcp --sport "$port:$((port + 99))" -j NFQUEUE --queue-num "$queue"
quotas="" slowest="" slowlist=""
for ((r = 0; r < ranks; r++)); do
    quotas+="${quotas:+/}$(cpu_of $r)"
    slowlist+="${slowlist:+ }$(slow_of $r)"
    [[ $(slow_of $r) == 1 ]] || slowest=1
done
echo "testbed: $ranks ranks at ${quotas}% of a core$([[ -n $slowest ]] && echo ", slowed down ${slowlist// //}x"), links ${delay} +- ${jitter} ms one way, ${loss}% loss," \
     "$( [[ $rate == 0 ]] && echo "unlimited rate" || echo "one shared ${rate} Mbit/s medium")" \
     "(cgroups $tag-rank*, NFQUEUE $queue on ports $port-$((port + 99)))" >&2

wrapper="$(mktemp)"
trap 'cleanup; rm -f "$wrapper"; rm -rf "$ctl"' EXIT
cat > "$wrapper" <<WRAP
#!/usr/bin/env bash
echo \$\$ > "$cgroot/$tag-rank\$OMPI_COMM_WORLD_RANK/cgroup.procs"
slow=($slowlist)
export MESHINFER_SLOWDOWN=\${slow[\$OMPI_COMM_WORLD_RANK]}
export MESHINFER_SLOWDOWN_FILE="$ctl/slow\$OMPI_COMM_WORLD_RANK"
exec "\$@"
WRAP
chmod +x "$wrapper"
# mpirun runs in the background so that a signal to this script (not only a
# Ctrl-C to the whole process group) stops the run before the clean-up: bash
# defers traps while a foreground child runs.
mpi_opts=(--mca btl self,tcp --mca btl_tcp_if_include lo --mca osc pt2pt
          --mca btl_tcp_port_min_v4 "$port" --mca btl_tcp_port_range_v4 100 -x OPENBLAS_NUM_THREADS=1)
if ((launcher)); then
    MESHINFER_TESTBED_MPI="${mpi_opts[*]}" MESHINFER_TESTBED_WRAPPER="$wrapper" MESHINFER_BIN="$bin" "$@" < /dev/null &
else
    mpirun --allow-run-as-root -q --oversubscribe --bind-to none -np "$ranks" --mca mpi_yield_when_idle 1 "${mpi_opts[@]}" \
        "$wrapper" "$bin" "$@" < /dev/null &
fi
mpi_pid=$!
save_state
# scheduled changes: a link that degrades, a device that slows down
change_pids=()
for ch in "${changes[@]}"; do
    (
        t=${ch%%:*} what=${ch#*:}
        sleep "$t"
        kill -0 "$mpi_pid" 2>/dev/null || exit 0
        if [[ $what == link=* ]]; then
            v=${what#link=}
            echo "${v%/*} ${v#*/}" > "$ctl/link.tmp" && mv "$ctl/link.tmp" "$ctl/link" && kill -USR1 "$netem_pid"
            echo "testbed: at ${t} s: links ${v%/*} ms, rate ${v#*/} Mbit/s" >&2
        else
            k=${what#rank=}; k=${k%%,*}; v=${what##*slowdown=}
            echo "$v" > "$ctl/slow$k.tmp" && mv "$ctl/slow$k.tmp" "$ctl/slow$k"
            echo "testbed: at ${t} s: rank $k ${v}x slower" >&2
        fi
    ) &
    change_pids+=($!)
done
stop_run() {
    kill "${change_pids[@]}" 2>/dev/null || true
    kill -TERM "$mpi_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$mpi_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$mpi_pid" 2>/dev/null || true
    echo "testbed: interrupted: run stopped; removing its cgroups, iptables rules and mi_netem" >&2
    exit 130
}
trap stop_run INT TERM
rc=0
wait "$mpi_pid" || rc=$?
if ((${#change_pids[@]})); then
    kill "${change_pids[@]}" 2>/dev/null || true
    wait "${change_pids[@]}" 2>/dev/null || true
fi
exit "$rc"
