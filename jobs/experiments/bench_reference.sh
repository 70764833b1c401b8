#!/usr/bin/env bash
# Side-by-side decode speed of meshinfer and two reference implementations, in
# one run on this machine, as ratios (the README may only state ratios measured
# like this, never a figure from another run or machine). The references are
# built from the user's own checkouts, which are only read:
#   --llama2c DIR  llama2.c: DIR/run.c built with `gcc -Ofast -march=native run.c -lm`
#   --dllama DIR   distributed-llama: DIR/Makefile and DIR/src copied to the work
#                  folder and built there with `make dllama`
# Comparisons (each alternates the programs round by round, reversing the order
# every other round, so machine noise hits all of them; median tokens/s of each
# and the ratio meshinfer / reference):
#   a. stories15M fp32, one thread, one process: llama2.c `run` (greedy) vs
#      `meshinfer bench`, over the same positions of the same prompt
#   b. distributed-llama vs meshinfer, one thread per node/rank, each on its own core:
#      1 node vs 1 rank; 2 nodes (root + a worker on 127.0.0.1) vs 2 ranks with
#      `--planner tp` (over TCP on loopback like dllama, and over shared memory);
#      stories15M fp32 (f32 messages), stories15M q4_0 (dllama q40 weights, q80
#      buffers; meshinfer q4_0 weights, --wire-dtype q8_0), and the TinyLlama-1.1B
#      shape in q4_0 with q8 messages (synthetic weights: speed only). distributed-llama
#      cannot run stories15M q40 on 2 nodes (its even split leaves each node 144 of the
#      288 attention dimensions, not whole 32-element blocks): that row says why, and
#      meshinfer's figures stand alone there.
# How each program measures tokens/s (all greedy, 1 thread):
#   llama2.c run.c  "achieved tok/s" = (positions - 1) / wall time from the end of
#                   the first forward to the end; prompt positions are forwarded one
#                   at a time like generated ones; includes sampling and printing.
#                   It stops early when the model emits BOS, so meshinfer runs the
#                   same number of positions (found with `meshinfer generate`).
#   meshinfer bench decode_tokens_per_s = (steps - prompt tokens) / wall time of the
#                   decode loop after a batched prefill of the prompt; includes argmax.
#   dllama          "Prediction tokens/s" = decoded tokens / summed executor time
#                   (ops + node sync) after a batched prefill of all prompt tokens
#                   but the last; excludes sampling, detokenizing and printing.
# Before timing, the greedy texts must agree: distributed-llama and llama2.c must
# continue "Once upon a time" with the text `meshinfer generate` writes
# (otherwise a conversion is wrong). distributed-llama gets the model through
# jobs/lib/to_dllama.py (see there for how its tokenizer is made to encode
# prompts as we do) and the prompt " Once upon a time" (it adds no dummy space).
#
# usage: jobs/experiments/bench_reference.sh (--llama2c DIR | --dllama DIR)... [options]
#   --rounds N              rounds of each stories15M comparison (default 5)
#   --steps N               positions of the stories15M runs (default 256)
#   --tinyllama-rounds N    rounds of the TinyLlama comparisons (default 3; 0 skips them)
#   --tinyllama-steps N     positions of the TinyLlama runs (default 44: 12-token prompt + 32)
#   --out DIR               results (default results/reference): reference.csv (one row per
#                           configuration and round), reference.md (table), reference.json,
#                           logs/ (every run's output)
#   --work DIR              builds and converted models (default .cache/bench_reference)
#   --port P                TCP port of the distributed-llama worker (default 9998)
# Needs python3-numpy and python3-h5py (installed with apt-get when missing) for the
# converter, and Open MPI (jobs/dev/build.sh). With the defaults a run takes about 1.5 minutes on
# a 2-core machine (builds and checks included; the converted models are kept in --work).
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
# shellcheck source=../lib/reference_builds.sh
. "$root/jobs/lib/reference_builds.sh"
cache="$root/models/cache"
py=/usr/bin/python3
llama2c="" dllama="" rounds=5 steps=256 tl_rounds=3 tl_steps=44 port=9998
out="$root/results/reference" work="$root/.cache/bench_reference"
log() { echo "bench_reference: $*" >&2; }
while (($#)); do
    need_value "$@"
    case "$1" in
        --llama2c) llama2c=$2; shift 2 ;;
        --dllama) dllama=$2; shift 2 ;;
        --rounds) opt_int "$1" "$2" 1 1000; rounds=$2; shift 2 ;;
        --steps) opt_int "$1" "$2" 16 256; steps=$2; shift 2 ;; # (stories15M's context)
        --tinyllama-rounds) opt_int "$1" "$2" 0 1000; tl_rounds=$2; shift 2 ;;
        --tinyllama-steps) opt_int "$1" "$2" 16 2048; tl_steps=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        --port) opt_port "$1" "$2"; port=$2; shift 2 ;;
        *) bad_option "$1" ;;
    esac
done
[[ -n $llama2c || -n $dllama ]] || arg_fail "give --llama2c DIR and/or --dllama DIR (see --help)"
if [[ -n $llama2c ]]; then
    llama2c="$(cd "$llama2c" 2>/dev/null && pwd)" || arg_fail "--llama2c: no such folder"
    [[ -f $llama2c/run.c ]] || fail "--llama2c $llama2c has no run.c (a llama2.c checkout?)"
fi
if [[ -n $dllama ]]; then
    dllama="$(cd "$dllama" 2>/dev/null && pwd)" || arg_fail "--dllama: no such folder"
    [[ -f $dllama/Makefile && -f $dllama/src/dllama.cpp ]] ||
        fail "--dllama $dllama has no Makefile and src/dllama.cpp (a distributed-llama checkout?)"
fi
mkdir -p "$out" "$work"
out="$(cd "$out" && pwd)"; work="$(cd "$work" && pwd)"
t_start=$(date +%s) date_start=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# ------------------------------------------------------------------ setup
pkgs=(python3-numpy python3-h5py)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    log "installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
meshinfer_bin
command -v taskset >/dev/null || fail "taskset (util-linux) is needed"
ncores=$(nproc)
((ncores >= 2)) || log "warning: $ncores core(s): the 2-node/2-rank runs share a core"
core1=$((ncores >= 2 ? 1 : 0))
if [[ ! -f $cache/stories15M.h5 || ! -f $cache/stories15M.bin || ! -f $cache/tokenizer.bin ]]; then
    "$root/jobs/dev/fetch_model.sh" >/dev/null
fi
s15="$cache/stories15M.h5"
s15q="$work/stories15M-q4_0.h5"
if [[ ! -f $s15q || $s15 -nt $s15q ]]; then
    log "quantizing stories15M to q4_0"
    "$bin" quantize -m "$s15" --dtype q4_0 --out "$s15q" >&2
fi
tl="$cache/tinyllama-synth-q4_0.h5"
if ((tl_rounds > 0 && ${#dllama})) && [[ ! -f $tl ]]; then
    log "writing $tl (TinyLlama-1.1B shape, synthetic weights, q4_0)"
    "$bin" synth --shape tinyllama-1.1b --seed 1 --dtype q4_0 --out "$tl" >&2
fi

logs="$out/logs"; rm -rf "$logs"; mkdir -p "$logs"
# The distributed-llama worker is started inside $(...) subshells: its PID is
# also kept in a file, so that an interrupted run still stops it (that PID only).
worker_pid="" worker_pidfile="$work/worker.pid"
stop_worker() {
    [[ -z $worker_pid && -f $worker_pidfile ]] && worker_pid=$(cat "$worker_pidfile")
    if [[ -n $worker_pid ]]; then
        kill "$worker_pid" 2>/dev/null || true
        wait "$worker_pid" 2>/dev/null || true
        worker_pid=""
    fi
    rm -f "$worker_pidfile"
}
trap stop_worker EXIT

l2c_bin="" dl_bin="" l2c_commit="" dl_commit=""
if [[ -n $llama2c ]]; then
    mkdir -p "$work/llama2c"
    l2c_bin="$work/llama2c/run"; l2c_commit=$(commit_of "$llama2c")
    log "building llama2.c run.c ($llama2c, $l2c_commit)"
    gcc -Ofast -march=native "$llama2c/run.c" -lm -o "$l2c_bin"
fi
if [[ -n $dllama ]]; then
    dl_commit=$(commit_of "$dllama")
    dl_bin=$(build_dllama "$dllama" "$work" "$logs") || exit 1
fi

# ------------------------------------------------------------------ runners
prompt="Once upon a time"
dl_prompt=" $prompt"   # dllama adds no dummy prefix space; ours (like sentencepiece) does
json_field() { "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
# the text dllama printed after the prompt (its pieces, one "🔶 Pred" line each)
dl_text() {
    "$py" - "$1" <<'PY'
import re, sys
out = open(sys.argv[1], encoding="utf-8", errors="replace").read()
segs = re.findall(r"🔶 Pred[^|]*\|[^|]*\| (.*?)\n(?=🔶 Pred|\nEvaluation)", out, re.S)
sys.stdout.write("".join(s for s in segs if s != "~"))
PY
}
dl_field() {  # dl_field LOG Evaluation|Prediction nTokens|tokens/s
    awk -v sec="$2" -v key="$3" '$1 == sec {s = 1; next} s && $1 == key":" {print $2; exit}' "$1"
}
dl_error() { grep -a -m1 -E "Assertion|Critical error|rror" "$1" | sed 's/^[^A-Za-z]*//' | cut -c1-160; }

# spec fields are separated by '|':
#   llama2c|POSITIONS
#   dllama|NODES|MODEL.m|TOKENIZER.t|BUFFER_TYPE|POSITIONS
#   mesh|RANKS|TRANSPORT(none|tcp|shm)|MODEL.h5|POSITIONS|WIRE_DTYPE
mpi_transport() {
    case "$1" in
        tcp) echo "--mca btl self,tcp --mca btl_tcp_if_include lo --mca osc pt2pt" ;;
        shm) echo "--mca btl self,vader" ;;
    esac
}
cmd_of() {  # the command a spec runs, for the table
    local -a f; IFS='|' read -r -a f <<< "$1"
    case "${f[0]}" in
        llama2c) echo "taskset -c 0 $l2c_bin $cache/stories15M.bin -z $cache/tokenizer.bin -t 0 -n $steps -i \"$prompt\"" ;;
        dllama)
            local c="dllama inference --model ${f[2]} --tokenizer ${f[3]} --buffer-float-type ${f[4]} --nthreads 1 --steps ${f[5]} --prompt \"$dl_prompt\" --temperature 0 --seed 1"
            if ((f[1] == 1)); then echo "taskset -c 0 $dl_bin ${c#dllama }"
            else echo "taskset -c $core1 $dl_bin worker --port $port --nthreads 1 & taskset -c 0 $dl_bin ${c#dllama } --workers 127.0.0.1:$port"; fi ;;
        mesh)
            local m="$bin bench -m ${f[3]} --steps ${f[4]} --repeat 1 --no-baseline --stream-mb 16 --json"
            [[ ${f[5]} == fp32 ]] || m="$m --wire-dtype ${f[5]}"
            if ((f[1] == 1)); then echo "taskset -c 0 $m"
            else echo "mpirun --allow-run-as-root -q -np ${f[1]} --bind-to core $(mpi_transport "${f[2]}") -x OPENBLAS_NUM_THREADS=1 $m --planner tp"; fi ;;
    esac
}
wait_listen() {  # until something listens on $port (at most 10 s)
    local i
    for ((i = 0; i < 100; i++)); do
        if command -v ss >/dev/null; then
            [[ -n $(ss -Hltn "sport = :$port" 2>/dev/null) ]] && return 0
        elif ((i >= 10)); then return 0; fi
        kill -0 "$worker_pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
# run_spec SPEC LOG: prints tokens/s, or fails with the reason in $LOG.err
run_spec() {
    local -a f; IFS='|' read -r -a f <<< "$1"; local lg=$2
    case "${f[0]}" in
        llama2c)
            taskset -c 0 "$l2c_bin" "$cache/stories15M.bin" -z "$cache/tokenizer.bin" -t 0 -n "$steps" -i "$prompt" \
                > "$lg" 2> "$lg.stderr" || { echo "run exited with $?" > "$lg.err"; return 1; }
            local v; v=$(sed -n 's/^achieved tok\/s: //p' "$lg.stderr")
            [[ -n $v ]] || { echo "no 'achieved tok/s' line" > "$lg.err"; return 1; }
            echo "$v" ;;
        dllama)
            local -a args=(inference --model "${f[2]}" --tokenizer "${f[3]}" --buffer-float-type "${f[4]}"
                           --nthreads 1 --steps "${f[5]}" --prompt "$dl_prompt" --temperature 0 --seed 1)
            if ((f[1] > 1)); then
                if command -v ss >/dev/null && [[ -n $(ss -Hltn "sport = :$port" 2>/dev/null) ]]; then
                    echo "port $port is already in use (--port)" > "$lg.err"; return 1
                fi
                taskset -c "$core1" "$dl_bin" worker --port "$port" --nthreads 1 > "$lg.worker" 2>&1 &
                worker_pid=$!; echo "$worker_pid" > "$worker_pidfile"
                wait_listen || { stop_worker; echo "the worker did not start (see $lg.worker)" > "$lg.err"; return 1; }
                args+=(--workers "127.0.0.1:$port")
            fi
            local rc=0
            timeout 900 taskset -c 0 "$dl_bin" "${args[@]}" > "$lg" 2>&1 || rc=$?
            stop_worker
            local v; v=$(dl_field "$lg" Prediction tokens/s)
            if ((rc != 0)) || [[ -z $v ]]; then
                echo "dllama exited with $rc: $(dl_error "$lg")" > "$lg.err"; return 1
            fi
            echo "$v" ;;
        mesh)
            local -a m=("$bin" bench -m "${f[3]}" --steps "${f[4]}" --repeat 1 --no-baseline --stream-mb 16 --json)
            [[ ${f[5]} == fp32 ]] || m+=(--wire-dtype "${f[5]}")
            local rc=0
            if ((f[1] == 1)); then
                OPENBLAS_NUM_THREADS=1 taskset -c 0 "${m[@]}" > "$lg" 2> "$lg.stderr" || rc=$?
            else
                # shellcheck disable=SC2046
                mpirun --allow-run-as-root -q -np "${f[1]}" --bind-to core $(mpi_transport "${f[2]}") \
                    -x OPENBLAS_NUM_THREADS=1 "${m[@]}" --planner tp > "$lg" 2> "$lg.stderr" || rc=$?
            fi
            if ((rc != 0)); then
                echo "meshinfer exited with $rc: $(grep -m1 -i error "$lg.stderr" | cut -c1-160)" > "$lg.err"; return 1
            fi
            json_field "$lg" decode_tokens_per_s ;;
    esac
}

# ------------------------------------------------------------------ correctness
log "checks: greedy texts must agree before anything is timed"
n_check=60
"$bin" generate -m "$s15" -p "$prompt" -n "$n_check" --json > "$logs/check-meshinfer-fp32.json" 2>/dev/null
mesh_text=$(json_field "$logs/check-meshinfer-fp32.json" text)
l2c_positions=$steps
notes=()
if [[ -n $llama2c ]]; then
    # run.c stops when the model emits BOS: find that position with our generator
    "$bin" generate -m "$s15" -p "$prompt" -n $((steps - 5)) --ignore-eos --json > "$logs/check-meshinfer-bos.json" 2>/dev/null
    l2c_positions=$("$py" -c '
import json, sys
j = json.load(open(sys.argv[1])); t = j["tokens"]; n = j["prompt_tokens"]
print(n + t.index(1) if 1 in t else int(sys.argv[2]))' "$logs/check-meshinfer-bos.json" "$steps")
    run_spec "llama2c|$steps" "$logs/check-llama2c.txt" >/dev/null || fail "llama2.c: $(cat "$logs/check-llama2c.txt.err")"
    "$py" - "$logs/check-llama2c.txt" "$prompt$mesh_text" <<'PY' || fail "llama2.c's greedy text differs from meshinfer's (see $logs/check-llama2c.txt)"
import sys
got = open(sys.argv[1], encoding="utf-8", errors="replace").read()
sys.exit(0 if got.startswith(sys.argv[2]) else 1)
PY
    log "check: llama2.c continues \"$prompt\" with the same $n_check tokens as meshinfer; it stops at BOS after $l2c_positions positions"
    ((l2c_positions < steps)) &&
        notes+=("llama2.c stops when the model emits BOS: after $l2c_positions positions here, so meshinfer's side of comparison a runs --steps $l2c_positions (llama2.c still gets -n $steps)")
fi
if [[ -n $dllama ]]; then
    dl_s15="$work/stories15M-f32.m" dl_s15q="$work/stories15M-q40.m" dl_s15dq="$work/stories15M-q4_0-dequantized-f32.m"
    dl_tok="$work/llama2-tokenizer.t" dl_tl="$work/tinyllama-synth-q40.m" dl_tltok="$work/tinyllama-synth.t"
    conv() {  # conv OUT SRC ARGS...: convert when OUT is missing or older than SRC or the converter
        local o=$1 s=$2; shift 2
        if [[ ! -f $o || $s -nt $o || $root/jobs/lib/to_dllama.py -nt $o ]]; then
            "$py" "$root/jobs/lib/to_dllama.py" "$@" 2> "$logs/convert-$(basename "$o").log" ||
                fail "to_dllama.py failed (see $logs/convert-$(basename "$o").log)"
        fi
    }
    log "converting models for distributed-llama (into $work)"
    conv "$dl_tok" "$cache/tokenizer.bin" -m "$s15" --tokenizer-bin "$cache/tokenizer.bin" --tokenizer-out "$dl_tok"
    conv "$dl_s15" "$s15" -m "$s15" --weights f32 --model-out "$dl_s15"
    conv "$dl_s15q" "$s15q" -m "$s15q" --weights q40 --model-out "$dl_s15q"
    conv "$dl_s15dq" "$s15q" -m "$s15q" --weights f32 --model-out "$dl_s15dq"
    chk() {  # chk NAME MODEL BUF EXPECTED_TEXT: dllama 1 node, n_check tokens; 0 when the text agrees
        run_spec "dllama|1|$2|$dl_tok|$3|$((n_check + 4))" "$logs/check-dllama-$1.txt" >/dev/null ||
            fail "distributed-llama ($1): $(cat "$logs/check-dllama-$1.txt.err")"
        [[ $(dl_field "$logs/check-dllama-$1.txt" Evaluation nTokens) == 4 ]] ||
            fail "distributed-llama ($1) did not encode \"$dl_prompt\" into BOS + 4 tokens as we do (tokenizer conversion)"
        [[ "$(dl_text "$logs/check-dllama-$1.txt")" == "$4" ]]
    }
    chk fp32 "$dl_s15" f32 "$mesh_text" ||
        fail "distributed-llama's greedy text (fp32) differs from meshinfer's: the conversion is wrong (see $logs/check-dllama-fp32.txt)"
    log "check: distributed-llama fp32 continues \"$prompt\" with the same $n_check tokens as meshinfer"
    "$bin" generate -m "$s15q" -p "$prompt" -n "$n_check" --json > "$logs/check-meshinfer-q4_0.json" 2>/dev/null
    mesh_q_text=$(json_field "$logs/check-meshinfer-q4_0.json" text)
    chk q4_0-dequantized "$dl_s15dq" f32 "$mesh_q_text" ||
        fail "distributed-llama on our q4_0 weights (dequantized to f32) writes another text than meshinfer q4_0 (see $logs/check-dllama-q4_0-dequantized.txt)"
    log "check: distributed-llama on our q4_0 weights (as f32) writes the same $n_check tokens as meshinfer q4_0"
    chk q40 "$dl_s15q" q80 "$mesh_q_text" || true
    same=$("$py" -c '
import os, sys
a, b = sys.argv[1], sys.argv[2]
print(len(os.path.commonprefix([a, b])))' "$(dl_text "$logs/check-dllama-q40.txt")" "$mesh_q_text")
    ((same >= 20)) || fail "distributed-llama q40 (q80 buffers) diverges from meshinfer q4_0 within $same characters: the q40 repack is wrong (see $logs/check-dllama-q40.txt)"
    if ((same < ${#mesh_q_text})); then
        notes+=("stories15M q4_0: distributed-llama (q40 weights, bit-identical to ours) and meshinfer q4_0 agree on the first $same characters of their $n_check-token texts, then differ. Both quantize every matmul input to 8-bit blocks of 32, distributed-llama with fp16 block scales (q80), meshinfer with fp32 ones; with the weights dequantized to f32 (no activation quantization) distributed-llama writes exactly meshinfer's q4_0 text")
        log "check: distributed-llama q40/q80 agrees with meshinfer q4_0 on $same characters, then differs (its q80 activations have fp16 scales, ours fp32)"
    fi
    if ((tl_rounds > 0)); then
        conv "$dl_tl" "$tl" -m "$tl" --weights q40 --model-out "$dl_tl" --tokenizer-out "$dl_tltok"
        "$bin" tokenize -m "$tl" -p "$prompt" > "$logs/check-tinyllama-tokens.txt" 2>/dev/null
        tl_prompt_tokens=$(wc -w < "$logs/check-tinyllama-tokens.txt")
        ((tl_steps > tl_prompt_tokens)) || fail "--tinyllama-steps must exceed the prompt's $tl_prompt_tokens tokens"
        run_spec "dllama|1|$dl_tl|$dl_tltok|q80|$((tl_prompt_tokens + 1))" "$logs/check-dllama-tinyllama.txt" >/dev/null ||
            fail "distributed-llama (TinyLlama): $(cat "$logs/check-dllama-tinyllama.txt.err")"
        [[ $(dl_field "$logs/check-dllama-tinyllama.txt" Evaluation nTokens) == $((tl_prompt_tokens - 1)) ]] ||
            fail "distributed-llama encodes the TinyLlama prompt into another number of tokens than we do ($tl_prompt_tokens)"
        log "check: both encode the TinyLlama prompt into $tl_prompt_tokens tokens"
    fi
fi

# ------------------------------------------------------------------ comparisons
# comparison: ID, label, rounds, then specs (the reference first)
cmp_ids=()
declare -A cmp_label cmp_rounds cmp_specs
add_cmp() {
    local id=$1
    cmp_ids+=("$id"); cmp_label[$id]=$2; cmp_rounds[$id]=$3; shift 3
    cmp_specs[$id]=$(printf '%s\n' "$@")
}
if [[ -n $llama2c ]]; then
    add_cmp a "stories15M fp32, 1 thread, 1 process: llama2.c run.c vs meshinfer" "$rounds" \
        "llama2c|$l2c_positions" "mesh|1|none|$s15|$l2c_positions|fp32"
fi
if [[ -n $dllama ]]; then
    add_cmp b1 "stories15M fp32, 1 node / 1 rank" "$rounds" \
        "dllama|1|$dl_s15|$dl_tok|f32|$steps" "mesh|1|none|$s15|$steps|fp32"
    add_cmp b2 "stories15M fp32, 2 nodes / 2 ranks (tp), fp32 messages" "$rounds" \
        "dllama|2|$dl_s15|$dl_tok|f32|$steps" "mesh|2|tcp|$s15|$steps|fp32" "mesh|2|shm|$s15|$steps|fp32"
    add_cmp b3 "stories15M q4_0/q40 weights, 8-bit activations, 1 node / 1 rank" "$rounds" \
        "dllama|1|$dl_s15q|$dl_tok|q80|$steps" "mesh|1|none|$s15q|$steps|fp32"
    add_cmp b4 "stories15M q4_0/q40 weights, q8_0 messages, 2 nodes / 2 ranks (tp)" "$rounds" \
        "dllama|2|$dl_s15q|$dl_tok|q80|$steps" "mesh|2|tcp|$s15q|$steps|q8_0" "mesh|2|shm|$s15q|$steps|q8_0"
    if ((tl_rounds > 0)); then
        add_cmp c1 "TinyLlama-1.1B shape (synthetic weights) q4_0/q40, 8-bit activations, 1 node / 1 rank" "$tl_rounds" \
            "dllama|1|$dl_tl|$dl_tltok|q80|$tl_steps" "mesh|1|none|$tl|$tl_steps|fp32"
        add_cmp c2 "TinyLlama-1.1B shape (synthetic weights) q4_0/q40, q8_0 messages, 2 nodes / 2 ranks (tp)" "$tl_rounds" \
            "dllama|2|$dl_tl|$dl_tltok|q80|$tl_steps" "mesh|2|tcp|$tl|$tl_steps|q8_0" "mesh|2|shm|$tl|$tl_steps|q8_0"
    fi
fi
side_name() {  # program and transport of a spec
    local -a f; IFS='|' read -r -a f <<< "$1"
    case "${f[0]}" in
        llama2c) echo "llama2.c" ;;
        dllama) ((f[1] == 1)) && echo "distributed-llama" || echo "distributed-llama (tcp)" ;;
        mesh) ((f[1] == 1)) && echo "meshinfer" || echo "meshinfer ($([[ ${f[2]} == tcp ]] && echo tcp || echo shared memory))" ;;
    esac
}

csv="$out/reference.csv"
echo "comparison,model,synthetic_weights,weights,messages,nodes,program,transport,round,positions,tokens_per_s,status,spec" > "$csv.partial"
# CPU use by others: the share of all cores busy during one second in which this
# script only sleeps (the load average would still count our own builds).
cpu_sample() { awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6}' /proc/stat; }
read -r b0 i0 < <(cpu_sample); sleep 1; read -r b1 i1 < <(cpu_sample)
busy=$(awk -v b=$((b1 - b0)) -v i=$((i1 - i0)) 'BEGIN {printf "%.2f", (b + i) ? b / (b + i) : 0}')
if awk -v x="$busy" 'BEGIN {exit !(x > 0.05)}'; then
    log "warning: $(awk -v x="$busy" 'BEGIN {printf "%.0f", 100 * x}')% of the CPU was busy with other work just before timing: it disturbs the timings"
fi
declare -A failed
for id in "${cmp_ids[@]}"; do
    mapfile -t specs <<< "${cmp_specs[$id]}"
    R=${cmp_rounds[$id]}
    log "comparison $id: ${cmp_label[$id]} ($R rounds)"
    for ((r = 1; r <= R; r++)); do
        order=("${!specs[@]}")
        if ((r % 2 == 0)); then  # reversed every other round
            mapfile -t order < <(printf '%s\n' "${!specs[@]}" | tac)
        fi
        for i in "${order[@]}"; do
            s=${specs[$i]}
            name=$(side_name "$s")
            [[ -n ${failed[$id.$i]:-} ]] && continue
            lg="$logs/$id-$i-round$r.txt"
            if v=$(run_spec "$s" "$lg"); then
                status=ok
                log "  round $r: $name $v tokens/s"
            else
                v=""; status="failed: $(cat "$lg.err")"; failed[$id.$i]=1
                log "  round $r: $name FAILED: $(cat "$lg.err") (not run again)"
            fi
            # one CSV row: the descriptive fields come from the spec
            "$py" - "$id" "$s" "$name" "$r" "$v" "$status" >> "$csv.partial" <<'PY'
import csv, sys
cid, spec, name, rnd, v, status = sys.argv[1:7]
f = spec.split("|")
kind = f[0]
if kind == "llama2c":
    model, weights, msgs, nodes, transport, pos = "stories15M", "fp32", "none", 1, "none", f[1]
elif kind == "dllama":
    model = "tinyllama-1.1b" if "tinyllama" in f[2] else "stories15M"
    weights = {"f32": "fp32", "q80": "q40"}[f[4]]
    msgs = ("fp32" if f[4] == "f32" else "q80") if int(f[1]) > 1 else "none"
    nodes, transport, pos = int(f[1]), ("tcp" if int(f[1]) > 1 else "none"), f[5]
else:
    model = "tinyllama-1.1b" if "tinyllama" in f[3] else "stories15M"
    weights = "q4_0" if "q4_0" in f[3] else "fp32"
    nodes = int(f[1])
    msgs = f[5] if nodes > 1 else "none"
    transport, pos = f[2], f[4]
csv.writer(sys.stdout, lineterminator="\n").writerow(
    [cid, model, "true" if model.startswith("tinyllama") else "false", weights, msgs, nodes, name,
     transport, rnd, pos, v, status, spec])
PY
        done
    done
done
mv "$csv.partial" "$csv"

# ------------------------------------------------------------------ report
t_end=$(date +%s)
meta_json=$("$py" - <<PY
import json, platform
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(json.dumps({"date_utc": "$date_start", "cpu": cpu, "cores": $ncores,
  "kernel": platform.release(), "cpu_busy_before_timing": float("$busy"), "seconds": $((t_end - t_start)),
  "meshinfer_commit": "$(commit_of "$root")", "llama2c": "$llama2c", "llama2c_commit": "$l2c_commit",
  "dllama": "$dllama", "dllama_commit": "$dl_commit", "rounds": $rounds, "steps": $steps,
  "tinyllama_rounds": $tl_rounds, "tinyllama_steps": $tl_steps, "prompt": "$prompt"}))
PY
)
notes_txt=$(printf '%s\n' "${notes[@]+"${notes[@]}"}")
cmds_txt=$(for id in "${cmp_ids[@]}"; do while IFS= read -r s; do printf '%s\t%s\n' "$s" "$(cmd_of "$s")"; done <<< "${cmp_specs[$id]}"; done)
labels_txt=$(for id in "${cmp_ids[@]}"; do printf '%s\t%s\n' "$id" "${cmp_label[$id]}"; done)
"$py" - "$csv" "$out/reference.md" "$out/reference.json" "$meta_json" "$notes_txt" "$cmds_txt" "$labels_txt" "$root" <<'PY'
import csv, json, statistics, sys
path, md_path, json_path, meta, notes, cmds, labels, root = sys.argv[1:9]
meta = json.loads(meta)
# commands as run from the repository root
cmd = {k: v.replace(root + "/", "") for k, v in (l.split("\t", 1) for l in cmds.splitlines() if l)}
label = dict(l.split("\t", 1) for l in labels.splitlines() if l)
rows = list(csv.DictReader(open(path)))
comps = []
for r in rows:
    if r["comparison"] not in comps:
        comps.append(r["comparison"])
out = {"meta": meta, "comparisons": []}
md = ["| comparison | program | tokens/s (median) | rounds | ratio meshinfer / reference (per-round range) | command |",
      "|---|---|---:|---:|---|---|"]
for c in comps:
    rs = [r for r in rows if r["comparison"] == c]
    specs = []
    for r in rs:
        if r["spec"] not in specs:
            specs.append(r["spec"])
    ref = specs[0]
    def vals(s):
        return {int(r["round"]): float(r["tokens_per_s"]) for r in rs if r["spec"] == s and r["status"] == "ok"}
    def status(s):
        bad = [r["status"] for r in rs if r["spec"] == s and r["status"] != "ok"]
        return bad[0] if bad else "ok"
    refv = vals(ref)
    entry = {"id": c, "label": label.get(c, c), "sides": []}
    for s in specs:
        v = vals(s)
        name = next(r["program"] for r in rs if r["spec"] == s)
        med = statistics.median(v.values()) if v else None
        side = {"program": name, "command": cmd.get(s, ""), "status": status(s), "rounds": len(v),
                "median_tokens_per_s": med, "tokens_per_s": [v[k] for k in sorted(v)]}
        ratio_txt = ""
        if s != ref:
            if v and refv:
                side["ratio"] = med / statistics.median(refv.values())
                per = [v[k] / refv[k] for k in v if k in refv]
                side["ratio_per_round_min"], side["ratio_per_round_max"] = min(per), max(per)
                ratio_txt = f"**{side['ratio']:.2f}x** ({min(per):.2f}-{max(per):.2f})"
            else:
                ratio_txt = "n/a (reference did not run)" if not refv else "n/a"
        tps = f"{med:.1f}" if med is not None else "could not run (see below)"
        first = f"{c}: {label.get(c, c)}" if s == ref else c
        md.append(f"| {first} | {name} | {tps} | {len(v)} | {ratio_txt} | `{side['command']}` |")
        entry["sides"].append(side)
    out["comparisons"].append(entry)
head = [f"# meshinfer vs reference implementations, side by side ({meta['date_utc']})", "",
        f"One run on one machine: {meta['cpu']}, {meta['cores']} cores ({100 * meta['cpu_busy_before_timing']:.0f}% "
        f"busy with other work just before timing); {meta['seconds']} s in all. llama2.c {meta['llama2c_commit'] or '-'}, distributed-llama "
        f"{meta['dllama_commit'] or '-'}, meshinfer {meta['meshinfer_commit']}. Every program greedy, one thread per "
        "process, each process on its own core; the programs of a comparison alternate round by round (order "
        "reversed every other round). Commands as run from the repository root.", ""]
def rounds(n):
    return f"{n} round{'' if n == 1 else 's'}"
has_c = any(e["id"].startswith("c") for e in out["comparisons"])
tail = ["", "How tokens/s are measured:"]
if meta["llama2c"]:
    tail.append("- llama2.c run.c: its \"achieved tok/s\", (positions - 1) / wall time after the first forward "
                "(prompt positions forwarded one by one; sampling and printing included).")
tail.append("- meshinfer bench: decode_tokens_per_s, (steps - prompt tokens) / wall time of the decode loop after a "
            "batched prefill (argmax included).")
if meta["dllama"]:
    tail.append("- distributed-llama: its \"Prediction tokens/s\", decoded tokens / summed executor time (ops + node "
                "sync) after a batched prefill; sampling, detokenizing and printing excluded.")
tail.append(f"- Prompt \"{meta['prompt']}\"" + (f" (\" {meta['prompt']}\" for distributed-llama, which adds no dummy "
            "space)" if meta["dllama"] else "") + ", the same tokens and positions in every program; stories15M "
            f"{meta['steps']} positions and {rounds(meta['rounds'])}" + (f", TinyLlama {meta['tinyllama_steps']} "
            f"positions and {rounds(meta['tinyllama_rounds'])} (synthetic weights: speed only)" if has_c else "") + ".")
if meta["dllama"]:
    tail.append("- 2 nodes / 2 ranks: distributed-llama's root and worker talk over TCP on 127.0.0.1; meshinfer runs "
                "under mpirun (tp planner) over TCP on loopback (like for like) and over shared memory (its default "
                "on one machine).")
tail += [f"- {n}" for n in notes.splitlines() if n]
failed = [(e["id"], s["program"], s["status"]) for e in out["comparisons"] for s in e["sides"] if s["status"] != "ok"]
for i, p, st in failed:
    why = st[len("failed: "):].replace("`", "'")
    if "BLOCK_SIZE" in why:
        why += (" (distributed-llama splits every matrix evenly over the nodes; here a node's slice is not a whole "
                "number of 32-element blocks, e.g. stories15M's 288 attention dimensions / 2 = 144)")
    tail.append(f"- {i}: {p} could not run: {why}")
text = "\n".join(head + md + tail) + "\n"
open(md_path, "w").write(text)
json.dump(out, open(json_path, "w"), indent=1)
sys.stdout.write(text)
PY
log "wrote $csv, $out/reference.md, $out/reference.json and logs/ ($((t_end - t_start)) s)"
