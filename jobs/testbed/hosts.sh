#!/usr/bin/env bash
# A testbed of hosts on one machine: every device of a cluster file
# becomes a host, a network namespace with its own address on a private /24
# bridge, its own name (in /etc/hosts and its own UTS hostname), its own CPU
# quota (a cgroup), and its own link: delay, jitter and loss on what it sends
# (mi_netem on an NFQUEUE inside the namespace: this kernel has no tc netem)
# and a bandwidth limit both ways (tc tbf on its two veth ends). mpirun runs
# on the machine itself, as on a laptop that launches a job on a cluster, and
# starts every rank, rank 0 included, on the hosts through Open MPI's rsh
# launcher with a small agent that enters the host's namespace and cgroup.
# Rank 0 lives on a host too because it is a device like the others: its
# link is shaped like theirs and the machine's own network stack stays
# untouched.
#
# Settings per device come from its "emulate" block in the cluster file
# (src/plan/cluster.c): cpu_pct (% of one core, default 100), slowdown (every
# compute op S times slower, default 1), delay_ms and jitter_ms (one way, on
# what the host sends: a round trip between hosts a and b takes
# delay_a + delay_b), loss_pct, rate_mbit (0: unlimited). The same file gives
# meshinfer the memory budgets (--cluster FILE), so one JSON describes the
# whole emulated cluster.
#
# Everything is removed when the run ends, fails or is interrupted:
# namespaces (and with them the veths, rules and emulators), the bridge, the
# /etc/hosts lines, the cgroups. A run killed outright (SIGKILL) is cleaned up
# by the next one (state in /run/meshinfer-hosts). Runs side by side never
# collide: each takes a free subnet 10.213.X.0/24 and the names miX-0, miX-1, ...
#
# usage: jobs/testbed/hosts.sh --cluster FILE [options] -- MESHINFER_ARGS...
#   --cluster FILE     the cluster file: one host per device (required)
#   --ranks N          ranks, one per host, on the first N devices (default: every device)
#   --hostfile FILE    place the ranks by this Open MPI hostfile ("NAME [slots=N]" lines,
#                      rank order follows them) instead of one rank per device in
#                      the cluster file's order; NAME is a device name of the cluster
#                      file; every name is checked
#                      before launch, so a host that does not resolve is one error line
#   --btl-if V         btl_tcp_if_include: the interfaces (names or subnets, comma
#                      separated) MPI messages between the ranks use (default the
#                      testbed's subnet 10.213.X.0/24; eth0 names the same)
#   --oob-if V         oob_tcp_if_include: the interfaces of Open MPI's control channel
#                      between mpirun, on this machine, and its daemons on the hosts
#                      (default the subnet; an interface name must exist on both sides)
#                      Both are checked against every host's addresses (and --oob-if
#                      against this machine's) before launch: a value that matches no
#                      address is one error line, not Open MPI's abort or hang
#   --mca-check off    skip that check and let Open MPI and meshinfer report it
#   --timeout S        stop the run after S seconds (default 0: none)
#   --launcher         after --, a command that starts its own mpirun jobs on the
#                      hosts, instead of meshinfer's arguments: it gets
#                      MESHINFER_HOSTS_MPI (the mpirun options: hostfile, agent, MCA
#                      parameters) and MESHINFER_HOSTS_HOSTFILE
#   --stats FILE       when the run ends, write per host what the machine measured
#                      of it (JSON): CPU seconds of its cgroup (cpuacct; orted and
#                      the rank) and bytes its link carried each way (its veth's
#                      counters: MPI payload plus TCP/IP headers, Open MPI's
#                      out-of-band messages and retransmissions)
#   --quiet            no summary line
# environment: MESHINFER_BIN  the meshinfer binary (default build/meshinfer, built first)
# example:
#   jobs/testbed/hosts.sh --cluster hostfiles/hosts-hetero.json -- generate \
#       -m models/cache/stories15M.h5 --cluster hostfiles/hosts-hetero.json --planner greedy --json
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
cluster="" ranks="" userhf="" btlif="" oobif="" mcacheck=1 timeout=0 launcher=0 quiet=0 stats=""
fail_status=2
while (($#)); do
    case "$1" in
        --cluster|--ranks|--hostfile|--btl-if|--oob-if|--mca-check|--timeout|--stats) need_value "$@" ;;&
        --cluster) cluster=$2; shift 2 ;;
        --ranks) opt_int "$1" "$2" 1 200; ranks=$2; shift 2 ;; # (hosts_cluster.js: at most 200 hosts)
        --hostfile) userhf=$2; shift 2 ;;
        --btl-if) [[ -n $2 ]] || arg_fail "--btl-if needs a value (interface names or A.B.C.D/N subnets)"; btlif=$2; shift 2 ;;
        --oob-if) [[ -n $2 ]] || arg_fail "--oob-if needs a value (interface names or A.B.C.D/N subnets)"; oobif=$2; shift 2 ;;
        --mca-check) [[ $2 == off ]] || arg_fail "--mca-check takes 'off'"; mcacheck=0; shift 2 ;;
        --timeout) opt_int "$1" "$2" 0 9999999; timeout=$2; shift 2 ;;
        --launcher) launcher=1; shift ;;
        --stats) [[ -n $2 ]] || arg_fail "--stats needs a file"; stats=$2; shift 2 ;;
        --quiet) quiet=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        *) bad_option "$1" ;;
    esac
done
[[ -n $cluster ]] || fail "give the cluster file: --cluster FILE (see --help)"
opt_file --cluster "$cluster"
[[ -z $userhf ]] || opt_file --hostfile "$userhf"
(($#)) || fail "give the meshinfer command after -- (see --help)"
for v in "btl-if=$btlif" "oob-if=$oobif"; do
    IFS=, read -r -a parts <<< "${v#*=}"
    for w in "${parts[@]}"; do
        [[ $w =~ ^[A-Za-z][A-Za-z0-9_.:-]{0,14}$ || $w =~ ^([0-9]{1,3}\.){3}[0-9]{1,3}/([0-9]|[12][0-9]|3[0-2])$ ]] ||
            fail "--${v%%=*}: '$w' is neither an interface name nor a subnet A.B.C.D/N (N at most 32)"
    done
done
if ((launcher)); then
    if [[ $1 == */* ]]; then [[ -f $1 && -x $1 ]] || fail "--launcher: '$1' is not an executable file"
    else [[ -n $(type -P "$1" 2>/dev/null) ]] || fail "--launcher: '$1' is not a command on PATH"; fi
fi
if [[ -n $stats ]]; then
    [[ -d $(dirname "$stats") ]] || fail "--stats: folder $(dirname "$stats") does not exist"
    [[ ! -d $stats ]] || fail "--stats: '$stats' is a folder; give a file name"
    # a file of our own there, not the .partial name (which could be someone's file)
    probe=$(mktemp "$(dirname "$stats")/.hosts-stats.XXXXXX" 2> /dev/null) && rm -f "$probe" ||
        fail "--stats: cannot write in $(dirname "$stats") (the file is written whole there, then renamed)"
    for input in "$cluster" "$userhf"; do
        [[ -n $input && $(realpath -m "$stats") == $(realpath -m "$input") ]] && fail "--stats $stats is an input of the run; give another file"
    done
fi
command -v node > /dev/null || fail "needs node (Node.js) to read the cluster file"
hostsdef=$(node "$root/jobs/lib/hosts_cluster.js" "$cluster") || exit 2
mapfile -t lines <<< "$hostsdef"
n_dev=${#lines[@]}
# --hostfile: lines "NAME [slots=N]", checked now; hf_dev/hf_slots hold them
hf_dev=() hf_slots=() hf_total=0
if [[ -n $userhf ]]; then
    devnames=()
    for l in "${lines[@]}"; do read -r _ _ _ _ _ _ nm <<< "$l"; devnames+=("$nm"); done
    ln=0
    while IFS= read -r line || [[ -n $line ]]; do
        ln=$((ln + 1))
        line=${line%$'\r'}
        line=${line%%#*}
        read -r h rest <<< "$line" || true
        [[ -n ${h:-} ]] || continue
        slots=1
        if [[ -n ${rest:-} ]]; then
            [[ $rest =~ ^slots=([1-9][0-9]{0,2})$ ]] || fail "--hostfile $userhf line $ln: '$rest' is not slots=N"
            slots=${BASH_REMATCH[1]}
        fi
        d=-1
        for ((k = 0; k < n_dev; k++)); do [[ ${devnames[$k]} == "$h" ]] && { d=$k; break; }; done
        if ((d < 0)); then
            if getent hosts "$h" > /dev/null; then
                fail "--hostfile $userhf line $ln: host '$h' resolves, but to no host of this testbed; name a device of $cluster (${devnames[*]})"
            else
                fail "--hostfile $userhf line $ln: host '$h' does not resolve (no /etc/hosts line or DNS record) and is no device of $cluster (${devnames[*]}); fix the name or add the device"
            fi
        fi
        hf_dev+=("$d") hf_slots+=("$slots"); hf_total=$((hf_total + slots))
    done < "$userhf"
    ((hf_total > 0)) || fail "--hostfile $userhf names no host"
    ranks=${ranks:-$hf_total}
    ((ranks <= hf_total)) || fail "--hostfile $userhf gives $hf_total slot(s), fewer than the $ranks ranks asked for; add slots=N or hosts"
fi
ranks=${ranks:-$n_dev}
((ranks <= n_dev || hf_total > 0)) || fail "cluster file $cluster gives $n_dev host(s), fewer than the $ranks ranks asked for; add devices to it or use --ranks $n_dev"
# the testbed makes every device's host when a hostfile places the ranks, else the first $ranks
n_hosts=$ranks
[[ -n $userhf ]] && n_hosts=$n_dev
names=() cpus=() slows=() delays=() jitters=() losses=() rates=()
for ((i = 0; i < n_hosts; i++)); do
    read -r c s d j l r nm <<< "${lines[$i]}" # (the name last: it may hold spaces)
    names+=("$nm") cpus+=("$c") slows+=("$s") delays+=("$d") jitters+=("$j") losses+=("$l") rates+=("$r")
done

((launcher)) || check_model_args "$@"
[[ $(id -u) -eq 0 ]] || { fail_status=1; fail "needs root (network namespaces, cgroups, iptables)"; }
# packages only when a command is missing: the binaries are built once, not on every run
for c in iptables ip tc flock unshare; do
    command -v "$c" > /dev/null && continue
    . "$root/jobs/lib/packages.sh"
    ensure_packages hosts iptables iproute2 util-linux
    break
done
meshinfer_bin
netem_bin
cgroot=/sys/fs/cgroup/cpu acctroot=/sys/fs/cgroup/cpuacct
[[ -w $cgroot && -w $acctroot ]] ||
    { fail_status=1; fail "$cgroot or $acctroot (cgroup v1 cpu and cpuacct controllers) is not writable"; }
ip netns list > /dev/null 2>&1 || { fail_status=1; fail "this kernel or container cannot make network namespaces (ip netns)"; }

statedir=/run/meshinfer-hosts
mkdir -p "$statedir"
# A host's names: the namespace, the /etc/hosts name, the UTS hostname and
# the cgroup are all miX-I; Open MPI drops everything after a dot in a host
# name, so there is none.
# remove_hosts ID NHOSTS MPIRUN_PID "NETEM_PIDS": what run ID made (each step harmless if already done)
# (a subshell without errexit: a namespace's deletion takes its veth with it,
# so a step failing because an earlier one did its work must not stop the rest)
remove_hosts() (
    set +e
    local id=$1 n=$2 mpi=$3 netems=$4 i ns g p
    [[ -n $mpi && "$(cat "/proc/$mpi/comm" 2>/dev/null)" == mpirun ]] && kill -KILL "$mpi" 2>/dev/null
    # a namespace lives on while a process is inside it, and so do its veths:
    # the emulators go first, by pid (they are in no cgroup of the run)
    for p in $netems; do
        [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == mi_netem ]] && kill -KILL "$p" 2>/dev/null
    done
    for ((i = 0; i < n; i++)); do
        ns="mi$id-$i"
        if [[ -e /run/netns/$ns ]]; then
            for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
            ip netns del "$ns" 2>/dev/null
        fi
        ip link del "mi${id}v$i" 2>/dev/null
        for g in "$cgroot/mi$id-$i" "$acctroot/mi$id-$i"; do
            [[ -d $g ]] || continue
            while read -r p; do kill -KILL "$p" 2>/dev/null; done < "$g/cgroup.procs"
            for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$g" 2>/dev/null && break; sleep 0.1; done
        done
    done
    ip link del "mi${id}br" 2>/dev/null
    # /etc/hosts may be a bind mount (containers): rewritten in place, never replaced
    (
        flock 9
        if grep -q " # meshinfer-hosts mi$id\$" /etc/hosts; then
            grep -v " # meshinfer-hosts mi$id\$" /etc/hosts > "$statedir/hosts.mi$id" || true
            cat "$statedir/hosts.mi$id" > /etc/hosts
            rm -f "$statedir/hosts.mi$id"
        fi
    ) 9> "$statedir/etc-hosts.lock"
    return 0
)
id="" mpi_pid="" work="" netem_pids=()
save_state() {
    printf 's_id=%q s_n=%q s_mpi=%q s_work=%q s_netem=%q\n' "$id" "$n_hosts" "$mpi_pid" "$work" "${netem_pids[*]}" > "$statedir/mi$id.state.tmp" &&
        mv "$statedir/mi$id.state.tmp" "$statedir/mi$id.state"
}
cleanup() {
    set +e
    [[ -n $id ]] || return 0
    if ((${#netem_pids[@]})); then
        kill "${netem_pids[@]}" 2>/dev/null
        wait "${netem_pids[@]}" 2>/dev/null
    fi
    remove_hosts "$id" "$n_hosts" "$mpi_pid" ""
    [[ -n $work ]] && rm -rf "$work"
    rm -f "$statedir/mi$id.state"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
# Choose a free subnet and claim it (its bridge address) under one lock, after
# removing what runs killed outright left behind.
exec 8> "$statedir/lock"
flock 8
for f in "$statedir"/mi*.state; do
    [[ -f $f ]] || continue
    s_id="" s_n=0 s_mpi="" s_work="" s_netem=""
    . "$f" 2>/dev/null || true
    owner=$(cat "$statedir/mi$s_id.owner" 2>/dev/null || echo "")
    # (read whole, not piped into grep -q: under pipefail its early exit
    # fails the pipeline, and a live run's hosts would be taken for debris)
    cmd=$( { tr '\0' ' ' < "/proc/${owner:-0}/cmdline"; } 2>/dev/null || true)
    [[ -n $owner && $cmd == *hosts.sh* ]] && continue
    remove_hosts "$s_id" "$s_n" "$s_mpi" "$s_netem"
    [[ -n $s_work && $s_work == /tmp/mi-hosts.* ]] && rm -rf "$s_work"
    rm -f "$f" "$statedir/mi$s_id.owner"
    echo "hosts: removed what hosts run mi$s_id left behind (it was killed before it could clean up)" >&2
done
used=$(ip -4 -o addr show 2>/dev/null | awk '{print $4}')
links=$(ip -o link show 2>/dev/null | awk '{print $2}')
for x in $(seq 1 250); do
    [[ -e $statedir/mi$x.state ]] && continue
    grep -q "^10\.213\.$x\." <<< "$used" && continue
    grep -q "^mi${x}\(br\|v[0-9]*\)[@:]" <<< "$links" && continue
    id=$x
    break
done
[[ -n $id ]] || { fail_status=1; fail "no free subnet in 10.213.1-250.0/24 (250 testbeds running?)"; }
echo $$ > "$statedir/mi$id.owner"
work=$(mktemp -d /tmp/mi-hosts.XXXXXX)
save_state
trap 'cleanup; rm -f "$statedir/mi$id.owner"' EXIT
net="10.213.$id"
ip link add "mi${id}br" type bridge
ip addr add "$net.254/24" dev "mi${id}br"
ip link set "mi${id}br" up
flock -u 8
exec 8>&-

(
    flock 9
    # a last line without its newline would otherwise become part of our first
    # line, and go with it when the lines are removed
    [[ ! -s /etc/hosts || -z $(tail -c 1 /etc/hosts) ]] || echo >> /etc/hosts
    for ((i = 0; i < n_hosts; i++)); do echo "$net.$((i + 1)) mi$id-$i # meshinfer-hosts mi$id"; done >> /etc/hosts
) 9> "$statedir/etc-hosts.lock"
hostfile="$work/hostfile"
: > "$hostfile"
for ((i = 0; i < n_hosts; i++)); do
    ns="mi$id-$i"
    ip netns add "$ns"
    ip link add "mi${id}v$i" type veth peer name eth0 netns "$ns"
    ip link set "mi${id}v$i" master "mi${id}br" up
    ip netns exec "$ns" ip addr add "$net.$((i + 1))/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
    # Linux holds back a small segment while the previous one is still queued
    # in the host, and the emulator keeps it queued for the whole delay (see
    # jobs/testbed/testbed.sh); each namespace has its own setting, the machine's is untouched
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_autocorking=0
    if awk -v d="${delays[$i]}" -v l="${losses[$i]}" 'BEGIN {exit !(d > 0 || l > 0)}'; then
        ip netns exec "$ns" "$netem" --queue 1 --delay-ms "${delays[$i]}" --jitter-ms "${jitters[$i]}" \
            --loss-pct "${losses[$i]}" --seed $((id * 1000 + i)) < /dev/null > /dev/null 2> "$work/netem$i.log" &
        netem_pids+=($!)
        save_state
        sleep 0.1
        ip netns exec "$ns" iptables -I OUTPUT -o eth0 -j NFQUEUE --queue-num 1
    fi
    if [[ ${rates[$i]} != 0 ]]; then
        for end in "ip netns exec $ns tc qdisc add dev eth0" "tc qdisc add dev mi${id}v$i"; do
            $end root tbf rate "${rates[$i]}kbit" burst 32kbit latency 500ms
        done
    fi
    g="$cgroot/$ns"
    mkdir "$g" "$acctroot/$ns"
    # a period long enough that the quota is at least the kernel's 1 ms, short
    # enough that a throttled rank does not stall longer than a slow device would
    period=$(awk -v c="${cpus[$i]}" 'BEGIN {p = 5; while (c * p * 10 < 1000) p++; print p}')
    echo $((period * 1000)) > "$g/cpu.cfs_period_us"
    awk -v c="${cpus[$i]}" -v p="$period" 'BEGIN {printf "%d\n", c * p * 10}' > "$g/cpu.cfs_quota_us"
    echo "${slows[$i]}" > "$work/slow$i"
    [[ -n $userhf ]] || echo "$ns slots=1" >> "$hostfile"
done
for ((k = 0; k < ${#hf_dev[@]}; k++)); do echo "mi$id-${hf_dev[$k]} slots=${hf_slots[$k]}" >> "$hostfile"; done
# Open MPI's rsh launcher runs "AGENT HOST COMMAND": the agent puts itself in
# the host's cgroup (so orted and the rank inherit it) and runs the command in
# the host's namespace under the host's own hostname.
agent="$work/agent"
cat > "$agent" <<AGENT
#!/bin/sh
h=\$1; shift
case "\$h" in
    mi$id-[0-9]*) ;;
    *) echo "hosts: error: host '\$h' is not one of this testbed's hosts (mi$id-0 .. mi$id-$((n_hosts - 1))); use the hostfile it wrote" >&2; exit 1 ;;
esac
[ -e "/run/netns/\$h" ] || { echo "hosts: error: host '\$h' does not exist (the testbed has mi$id-0 .. mi$id-$((n_hosts - 1)))" >&2; exit 1; }
echo \$\$ > "$cgroot/\$h/cgroup.procs" && echo \$\$ > "$acctroot/\$h/cgroup.procs" || exit 1
export MESHINFER_SLOWDOWN="\$(cat "$work/slow\${h##*-}")" MESHINFER_SLOWDOWN_FILE="$work/slow\${h##*-}"
exec ip netns exec "\$h" unshare --uts sh -c 'hostname "\$0"; exec sh -c "\$1"' "\$h" "\$*"
AGENT
chmod +x "$agent"
subnet="$net.0/24"
btlif=${btlif:-$subnet} oobif=${oobif:-$subnet}
# in_subnet A.B.C.D/BITS ADDRESS
in_subnet() {
    awk -v s="$1" -v a="$2" 'function n(x,  o) {split(x, o, "."); return ((o[1] * 256 + o[2]) * 256 + o[3]) * 256 + o[4]}
        BEGIN {split(s, p, "/"); d = 2 ^ (32 - p[2]); exit !(p[2] ~ /^[0-9]+$/ && p[2] <= 32 && int(n(p[1]) / d) == int(n(a) / d))}'
}
# matching VALUE: from "DEV ADDR/LEN" lines on stdin, the addresses VALUE selects
matching() {
    local dev a w
    IFS=, read -r -a ws <<< "$1"
    while read -r dev a; do
        for w in "${ws[@]}"; do
            if [[ $w == */* ]]; then in_subnet "$w" "${a%/*}" && { echo "${a%/*}"; break; }
            elif [[ $w == "$dev" ]]; then echo "${a%/*}"; break; fi
        done
    done
    return 0 # (the loop's status is its last test's: no match on the last line is not a failure)
}
# Open MPI ignores an interface list that matches nothing on a host with a
# warning and then cannot connect that host's rank (MPI_ERR_INTERN at the
# first message), and its daemons wait forever to call back to an mpirun whose
# control channel they cannot reach: both are checked here first.
if ((mcacheck)); then
    for ((i = 0; i < n_hosts; i++)); do
        ns="mi$id-$i"
        addrs=$(ip netns exec "$ns" ip -4 -o addr show | awk '{print $2, $4}')
        have="$(tr '\n' ' ' <<< "$addrs" | sed 's/ $//')"
        for v in "btl-if=$btlif" "oob-if=$oobif"; do
            sel=$(matching "${v#*=}" <<< "$addrs" | tr '\n' ' ' | sed 's/ $//')
            why=""
            if [[ -z $sel ]]; then
                why="matches no address of host $ns ($have), so Open MPI could not connect it"
            elif [[ " $sel" == *" 127."* ]]; then
                # every host's loopback address is that host itself: Open MPI
                # offers it to the others, which then connect to themselves
                why="selects a loopback address on host $ns ($sel), which every host has for itself, so the other hosts could not reach it (Open MPI would wait forever)"
            else
                reach=0
                for a in $sel; do in_subnet "$subnet" "$a" && reach=1; done
                ((reach)) || why="selects $sel on host $ns, not on the hosts' network $subnet"
            fi
            [[ -z $why ]] && continue
            echo "hosts: error: --${v%%=*} '${v#*=}' $why; use the hosts' subnet $subnet or their interface eth0" >&2
            exit 2
        done
    done
    mine=$(ip -4 -o addr show | awk '{print $2, $4}' | matching "$oobif" | tr '\n' ' ' | sed 's/ $//')
    ok=0
    for a in $mine; do in_subnet "$subnet" "$a" && ok=1; done
    if ((!ok)); then
        echo "hosts: error: --oob-if '$oobif' selects ${mine:-no address} on this machine, where mpirun runs," \
             "$( [[ -n $mine ]] && echo "which the hosts cannot reach,")" \
             "so their daemons could never call back (Open MPI would wait forever); use the subnet $subnet" >&2
        exit 2
    fi
fi
mpi_opts=(--hostfile "$hostfile" --mca plm_rsh_agent "$agent" --mca btl self,tcp --mca osc pt2pt
          --mca btl_tcp_if_include "$btlif" --mca oob_tcp_if_include "$oobif"
          --mca mpi_yield_when_idle 1 -x OPENBLAS_NUM_THREADS=1)
if ((!quiet)); then
    desc=""
    for ((i = 0; i < n_hosts; i++)); do
        desc+="${desc:+; }mi$id-$i=${names[$i]} ${cpus[$i]}%"
        [[ ${slows[$i]} != 1 ]] && desc+=" ${slows[$i]}x slower"
        desc+=" ${delays[$i]}+-${jitters[$i]} ms"
        [[ ${losses[$i]} != 0 ]] && desc+=" ${losses[$i]}% loss"
        [[ ${rates[$i]} != 0 ]] && desc+=" $(awk -v k="${rates[$i]}" 'BEGIN {print k / 1000}') Mbit/s"
    done
    echo "hosts: $ranks rank(s) on $n_hosts hosts on $subnet (bridge mi${id}br): $desc" >&2
fi
save_state
# Inside a Slurm job (jobs/testbed/sweep.slurm with HOSTS) Open MPI would take the job's
# allocation for its hosts and refuse ours ("All nodes which are allocated for
# this job are already filled"): the hosts are this testbed's, not Slurm's.
for v in $(compgen -e | grep '^SLURM_' || true); do unset "$v"; done
# mpirun runs in the background so that a signal to this script stops the
# run before the clean-up (bash defers traps while a foreground child runs)
if ((launcher)); then
    MESHINFER_HOSTS_MPI="${mpi_opts[*]}" MESHINFER_HOSTS_HOSTFILE="$hostfile" MESHINFER_BIN="$bin" "$@" < /dev/null &
else
    mpirun --allow-run-as-root -np "$ranks" "${mpi_opts[@]}" "$bin" "$@" < /dev/null &
fi
mpi_pid=$!
save_state
# stop_run CODE MESSAGE: the run ends before its time (a signal, or --timeout)
stop_run() {
    trap '' INT TERM HUP
    [[ -n ${watchdog:-} ]] && kill "$watchdog" 2>/dev/null || true
    kill -TERM "$mpi_pid" 2>/dev/null || true
    for _ in $(seq 20); do kill -0 "$mpi_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$mpi_pid" 2>/dev/null || true
    wait "$mpi_pid" 2>/dev/null || true
    echo >&2
    echo "hosts: $2; removing its hosts" >&2
    exit "$1"
}
trap 'stop_run 130 "interrupted: run stopped"' INT
trap 'stop_run 143 "terminated: run stopped"' TERM
trap 'stop_run 129 "hung up: run stopped"' HUP
trap 'stop_run 124 "error: the run took more than --timeout $timeout s; stopped"' USR1
if ((timeout > 0)); then
    # a loop of short sleeps, not one long one: an orphaned sleep would hold
    # the caller's pipe open for the rest of the timeout after the run ended
    ( trap 'exit 0' TERM
      for ((s = 0; s < timeout; s++)); do sleep 1; kill -0 "$mpi_pid" 2>/dev/null || exit 0; done
      kill -USR1 $$ ) &
    watchdog=$!
fi
rc=0
wait "$mpi_pid" || rc=$?
[[ -n ${watchdog:-} ]] && kill "$watchdog" 2>/dev/null || true
if [[ -n $stats ]]; then
    for ((i = 0; i < n_hosts; i++)); do
        v="/sys/class/net/mi${id}v$i/statistics"
        # the bridge side's counters: what it receives, the host sent
        echo "$i $(cat "$acctroot/mi$id-$i/cpuacct.usage") $(cat "$v/rx_bytes") $(cat "$v/tx_bytes")"
    done > "$work/counters"
    node "$root/jobs/lib/hosts_cluster.js" --stats "$cluster" "$work/counters" "$subnet" "$id" "$rc" > "$stats.partial" &&
        mv "$stats.partial" "$stats" ||
        { rm -f "$stats.partial"; echo "hosts: error: --stats: could not write $stats" >&2; ((rc)) || rc=1; }
fi
exit "$rc"
