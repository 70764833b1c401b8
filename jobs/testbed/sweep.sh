#!/usr/bin/env bash
# HeadSplit's experiment as a sweep on the emulated testbed (jobs/testbed/testbed.sh):
# planners x speculation on/off x rank counts x link delay (RTT) x loss x tolerance.
# Each run's --json is kept in DIR/NAME/runs/ (an interrupted sweep resumes
# where it stopped, given the same --out); jobs/lib/sweep_summary.js turns them into
#   DIR/NAME.csv           one row per run
#   DIR/NAME_table.md      seconds, ratio to layer-wise, bytes moved, per-device
#                              compute time and estimated energy, acceptance
# and gnuplot draws
#   NAME_time.png        seconds per configuration
#   NAME_acceptance.png  acceptance per layer transition (first speculating run)
#   NAME_bytes.png       MB moved over the whole run
#   NAME_breakdown.png   where the time goes: attention, FFN, communication, idle (summed over ranks)
#   NAME_active.png      compute seconds per device
#   NAME_rtt.png         seconds against measured RTT (when several delays are swept)
#
# usage: jobs/testbed/sweep.sh [options]
#   --model FILE        model (default models/cache/stories15M.h5)
#   --prompt TEXT       prompt (default the reference prompt of 14 tokens)
#   --tokens N          new tokens per run (default 242: 256 positions with the prompt)
#   --ranks "5"         rank counts (controller + workers)
#   --delays "5"        one-way link delays in ms (jitter is a fifth of the delay)
#   --losses "0"        packet loss in %
#   --planners "layerwise roundrobin random greedy"
#   --tolerances "0.05" speculation tolerances
#   --no-spec-off       skip head-level runs without speculation
#   --cpu-pct P         CPU quota per rank, % of one core (default 40)
#   --wire-dtype T      activation messages in fp32 (default), fp16 or q8_0 (use a --name per dtype)
#   --name NAME         output name in DIR (default sweep)
#   --out DIR           output folder (default results/YYYY-MM-DD, today's)
#   --quick             a try-out in a minute or two: 3 ranks, 16 tokens, every planner once
#                       (layerwise, tp, somegather, hybrid; roundrobin, random and greedy
#                       with speculation only); options given as well still count
#   --hosts FILE        run every configuration on the hosts testbed (jobs/testbed/hosts.sh) made from
#                       this cluster file: each rank its own host, with the CPU quota, slowdown
#                       and link of its device's "emulate" block (--delays, --losses and
#                       --cpu-pct then come from the file and may not be given); each run's
#                       per-host CPU seconds and link bytes join the table, and NAME_hosts.png
#                       plots TPOT, link MB and CPU time per host for every configuration
#   --cluster FILE      give meshinfer this cluster file (budgets, speeds, links) for planning
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
fail_status=2
model="" tokens=242 ranks="5" delays="5" losses="0" cpu=40 name=sweep out="$root/results/$(date +%F)"
prompt="Once upon a time, there was a little girl named Lily"
planners="layerwise roundrobin random greedy" tols="0.05" spec_off=1 wire=fp32 hosts="" mcluster="" testbed_opts=0
quick=0 given=" "
while (($#)); do
    case "$1" in
        --model|--prompt|--tokens|--ranks|--delays|--losses|--planners|--tolerances|--cpu-pct|--hosts|--cluster|--wire-dtype|--name|--out)
            need_value "$@"; given+="$1 " ;;&
        --model) model=$2; shift 2 ;;
        --prompt) prompt=$2; shift 2 ;;
        --tokens) tokens=$2; shift 2 ;;
        --ranks) ranks=$2; shift 2 ;;
        --delays) delays=$2; testbed_opts=1; shift 2 ;;
        --losses) losses=$2; testbed_opts=1; shift 2 ;;
        --planners) planners=$2; shift 2 ;;
        --tolerances) tols=$2; shift 2 ;;
        --no-spec-off) spec_off=0; shift ;;
        --cpu-pct) cpu=$2; testbed_opts=1; shift 2 ;;
        --hosts) hosts=$2; shift 2 ;;
        --cluster) mcluster=$2; shift 2 ;;
        --wire-dtype) wire=$2; shift 2 ;;
        --name) name=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) bad_option "$1" ;;
    esac
done
if ((quick)); then
    # the fewest runs that still show every planner, and speculation where it exists
    [[ $given == *" --tokens "* ]] || tokens=16
    [[ $given == *" --ranks "* ]] || ranks=3
    [[ $given == *" --planners "* ]] || planners="layerwise roundrobin random greedy tp somegather hybrid"
    spec_off=0
fi
[[ $name =~ ^[A-Za-z0-9._][A-Za-z0-9._-]*$ ]] || arg_fail "--name '$name' must be letters, digits, '.', '_' or '-' (not first)"
opt_ints --ranks "$ranks" 1 256
opt_int --tokens "$tokens" 1 1000000
opt_int --cpu-pct "$cpu" 1 100
[[ $wire =~ ^(fp32|fp16|q8_0)$ ]] || arg_fail "--wire-dtype '$wire' is not fp32, fp16 or q8_0"
[[ -n $hosts ]] || { opt_nums --delays "$delays" 0 60000; opt_nums --losses "$losses" 0 100; }
for v in $tols; do [[ $v =~ ^[0-9]+([.][0-9]+)?([eE][+-]?[0-9]+)?$ ]] || arg_fail "--tolerances: '$v' is not a number"; done
[[ -n $planners ]] || arg_fail "--planners is an empty list"
[[ -n $tols ]] || arg_fail "--tolerances is an empty list"
for v in $planners; do
    [[ $v =~ ^(layerwise|roundrobin|random|greedy|tp|somegather|hybrid)$ ]] ||
        arg_fail "--planners: unknown planner '$v' (layerwise roundrobin random greedy tp somegather hybrid)"
done
if [[ -n $hosts ]]; then
    opt_file --hosts "$hosts"
    ((!testbed_opts)) || arg_fail "--delays, --losses and --cpu-pct come from the cluster file's emulate blocks with --hosts"
    delays=hosts losses=hosts
fi
[[ -z $mcluster ]] || opt_file --cluster "$mcluster"
[[ -z $model ]] || opt_file --model "$model"
ranks=${ranks//,/ } delays=${delays//,/ } losses=${losses//,/ } # (commas as the checks above take them)
if [[ -n $model ]]; then check_model "$model"; else real_model; fi
runs="$out/$name/runs"
out_dir "$out" "$runs"
meshinfer_bin # (built here once, not by every testbed run)
failed=0
for n in $ranks; do for d in $delays; do for l in $losses; do for p in $planners; do for spec in 0 1; do
    # nothing to overlap in a pipeline of whole layers; tp, somegather and hybrid have no speculation
    [[ ($p == layerwise || $p == tp || $p == somegather || $p == hybrid) && $spec == 1 ]] && continue
    [[ $p =~ ^(roundrobin|random|greedy)$ && $spec == 0 && $spec_off == 0 ]] && continue
    for t in $tols; do
        [[ $spec == 0 && $t != "${tols%% *}" ]] && continue
        f="$runs/${p}_spec${spec}_tol${t}_r${n}_d${d}_l${l}.json"
        [[ -s $f ]] && { echo "sweep: have $(basename "$f")" >&2; continue; }
        extra=(); [[ $spec == 1 ]] && extra=(--speculate --tolerance "$t")
        [[ -n $mcluster ]] && extra+=(--cluster "$mcluster")
        gen=(generate -m "$model" -p "$prompt" -n "$tokens" --ignore-eos --planner "$p" --wire-dtype "$wire" "${extra[@]}" --json)
        if [[ -n $hosts ]]; then
            echo "sweep: $(date +%T) $p spec=$spec tol=$t ranks=$n on the hosts of $hosts" >&2
            bed=("$root/jobs/testbed/hosts.sh" --cluster "$hosts" --ranks "$n" --stats "${f%.json}.hosts.json")
        else
            echo "sweep: $(date +%T) $p spec=$spec tol=$t ranks=$n delay=${d}ms loss=${l}%" >&2
            bed=("$root/jobs/testbed/testbed.sh" --ranks "$n" --cpu-pct "$cpu" --delay-ms "$d" --jitter-ms "$(awk "BEGIN{print $d/5}")" --loss-pct "$l")
        fi
        if "${bed[@]}" -- "${gen[@]}" > "$f.partial" 2> "$f.log"; then
            mv "$f.partial" "$f"; rm -f "$f.log"
        else
            echo "sweep: run failed, see $f.log" >&2; rm -f "$f.partial" "${f%.json}.hosts.json"; failed=$((failed + 1))
        fi
    done
done; done; done; done; done
((failed == 0)) || echo "sweep: error: $failed run(s) failed (logs in $runs)" >&2
node "$root/jobs/lib/sweep_summary.js" "$runs" "$out/$name" || exit 1
"$root/jobs/lib/sweep_plots.sh" "$out/$name" || exit 1
((failed == 0)) || exit 1
