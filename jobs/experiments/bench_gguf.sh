#!/usr/bin/env bash
# An imported GGUF model against llama.cpp (and distributed-llama) side by side, in one run on
# this machine, as ratios; and the time `meshinfer convert` takes to import it. The model is a
# Llama-3.2-1B-shape (or --shape tinyllama-1.1b) model with SYNTHETIC weights (seeded random
# numbers, so speed only) and the real Llama 3 (Llama 2) tokenizer: jobs/lib/synth_gguf.py writes
# it as an F16 GGUF, llama.cpp's own `llama-quantize --pure IN OUT Q4_0` makes every tensor Q4_0
# (or `llama-quantize IN OUT TYPE` for --type TYPE, e.g. Q4_K_M: llama.cpp's own mix of q4_K and
# q6_K), and both programs run that file (meshinfer after `meshinfer convert`). The checkouts are only read:
#   --llamacpp DIR  a built llama.cpp: DIR/build/bin/llama-bench, llama-quantize, libllama.so and
#                   DIR/include/llama.h (jobs/lib/llama_greedy.c is built against them in --work)
#   --dllama DIR    optional, distributed-llama: DIR/Makefile and DIR/src copied to --work and
#                   built there with `make dllama`; the model is given to it by jobs/lib/to_dllama.py
#                   (q40 weights, bit for bit ours, the Llama 3 tokenizer and RoPE scaling)
# Measured:
#   conversion  wall time of `meshinfer convert --input X.gguf --out X.h5` of the Q4_0 file and
#               of the F16 one (1.24B parameters), --convert-rounds times each, alternating, the
#               GGUF in the page cache; the F16 files are deleted afterwards
#   a. 1 thread, 1 process, pinned to core 0: `llama-bench -t 1 -p 0 -n GEN -r 1` vs `meshinfer
#      bench` on the converted file
#   b. with --dllama: distributed-llama 1 node vs meshinfer 1 rank; 2 nodes (root + a worker on
#      127.0.0.1, over TCP) vs 2 ranks `--planner tp` with q8_0 messages over TCP and shared memory
#   c. meshinfer 2 ranks tp (shared memory) vs meshinfer 1 rank
# With --prefill N, prompt processing instead of decoding (a. only; no distributed-llama):
#   1 thread, 1 process, pinned to core 0: `llama-bench -t 1 -p N -n 0 -r 1` vs `meshinfer bench` with
#   a prompt of N tokens ("the the the ...", BOS included, checked with `meshinfer tokenize`)
# Every comparison alternates its programs round by round, the order reversed every other
# round; medians of each and the ratio meshinfer / reference, per round and overall.
# How each counts tokens/s (all decode one token per forward pass, one thread per process):
#   llama-bench  avg_ts: GEN / wall time of GEN single-token llama_decode calls at positions
#                0..GEN-1 (random tokens, no sampling), after a one-token warm-up; KV cache f16
#   meshinfer    decode_tokens_per_s: (steps - prompt tokens) / wall time of the decode loop after
#                a batched prefill of the prompt (BOS + "Once upon a time", 5 tokens; steps =
#                5 + GEN, so GEN tokens at positions 5..GEN+4); argmax included; KV cache fp32
#   dllama       "Prediction tokens/s": decoded tokens / summed executor time after a batched
#                prefill, over the same 5 + GEN positions; sampling and printing excluded
# and with --prefill N (prompt tokens/s):
#   llama-bench  avg_ts of pp N: N / wall time of one llama_decode of N random tokens (logits of the
#                last position only), after a warm-up run
#   meshinfer    prompt tokens / TTFT of bench: the N-token prompt in forward passes of 64 positions
#                (the runtime's prefill chunk; logits of the last position) and the argmax of the first
#                token; one decode step after it (not counted)
# Before anything is timed: llama.cpp and meshinfer must tokenize the prompt alike, llama.cpp's
# and meshinfer's logits of the prompt are compared (largest difference reported), and their
# greedy continuations (--check-tokens ids) must agree on at least the first 4 tokens (how many
# agree is reported); distributed-llama must encode the prompt into the same number of tokens
# and its greedy text must begin like meshinfer's.
#
# usage: jobs/experiments/bench_gguf.sh --llamacpp DIR [--dllama DIR] [options]
#   --shape S           llama3.2-1b (default) or tinyllama-1.1b
#   --type T            llama-quantize's type: Q4_0 (default, --pure), Q8_0 (--pure), Q4_K_M, Q5_K_M,
#                       Q6_K (llama.cpp's mixes); distributed-llama runs only with Q4_0
#   --rounds N          rounds of each decode comparison (default 5)
#   --gen N             decoded tokens per run (default 64)
#   --convert-rounds N  conversions of each GGUF (default 3; 0 skips the timing and the F16 file)
#   --check-tokens N    greedy tokens compared before timing (default 16)
#   --prefill N         time prompt processing of N tokens instead of decoding (2..2047; see above)
#   --seed S            seed of the synthetic weights (default 1)
#   --out DIR           results (default results/gguf): gguf.csv (one row per run), gguf.md
#                       (tables), gguf.json, logs/ (every run's output)
#   --work DIR          models and builds (default models/cache/bench): keeps the Q4_0 GGUF, its
#                       .h5 and distributed-llama's .m for the next run (3.2 GB), 5 GB more
#                       while the F16 GGUF and its .h5 exist
#   --port P            TCP port of the distributed-llama worker (default 9998)
# Needs python3-numpy and python3-h5py (installed when missing), a C compiler, taskset and
# Open MPI. A run with the defaults takes about 10 minutes on a 2-core machine.
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
# shellcheck source=../lib/reference_builds.sh
. "$root/jobs/lib/reference_builds.sh"
# shellcheck source=../lib/packages.sh
. "$root/jobs/lib/packages.sh"
py=/usr/bin/python3
llamacpp="" dllama="" shape=llama3.2-1b qtype=Q4_0 rounds=5 gen=64 conv_rounds=3 n_check=16 seed=1 port=9998 prefill=0
out="$root/results/gguf" work="$root/models/cache/bench"
while (($#)); do
    need_value "$@"
    case "$1" in
        --llamacpp) llamacpp=$2 ;;
        --dllama) dllama=$2 ;;
        --shape) [[ $2 == llama3.2-1b || $2 == tinyllama-1.1b ]] || arg_fail "--shape: llama3.2-1b or tinyllama-1.1b"
            shape=$2 ;;
        --type) [[ $2 =~ ^(Q4_0|Q8_0|Q4_K_M|Q5_K_M|Q6_K)$ ]] || arg_fail "--type: Q4_0, Q8_0, Q4_K_M, Q5_K_M or Q6_K"
            qtype=$2 ;;
        --rounds) opt_int "$1" "$2" 1 1000; rounds=$2 ;;
        --gen) opt_int "$1" "$2" 8 1024; gen=$2 ;;
        --convert-rounds) opt_int "$1" "$2" 0 1000; conv_rounds=$2 ;;
        --check-tokens) opt_int "$1" "$2" 4 128; n_check=$2 ;;
        --prefill) opt_int "$1" "$2" 2 2047; prefill=$2 ;;
        --seed) opt_int "$1" "$2" 0 999999999; seed=$2 ;;
        --out) out=$2 ;;
        --work) work=$2 ;;
        --port) opt_port "$1" "$2"; port=$2 ;;
        *) bad_option "$1" ;;
    esac
    shift 2
done
[[ -n $llamacpp ]] || arg_fail "give --llamacpp DIR, a built llama.cpp checkout (see --help)"
[[ -z $dllama || ($qtype == Q4_0 && $shape == llama3.2-1b) ]] ||
    arg_fail "--dllama runs only with --type Q4_0 and --shape llama3.2-1b"
[[ -z $dllama || $prefill == 0 ]] || arg_fail "--dllama compares decoding only: not with --prefill"
qt=${qtype,,}  # the file names' spelling: q4_0, q4_k_m
pure=(); [[ $qtype == Q4_0 || $qtype == Q8_0 ]] && pure=(--pure)
llamacpp="$(cd "$llamacpp" 2>/dev/null && pwd)" || arg_fail "--llamacpp: no such folder"
lbin="$llamacpp/build/bin"
for f in "$lbin/llama-bench" "$lbin/llama-quantize"; do
    [[ -x $f ]] || fail "--llamacpp $llamacpp has no $f (build llama-bench and llama-quantize)"
done
[[ -f $llamacpp/include/llama.h && -f $lbin/libllama.so ]] ||
    fail "--llamacpp $llamacpp has no include/llama.h and build/bin/libllama.so (a shared-library build)"
if [[ -n $dllama ]]; then
    dllama="$(cd "$dllama" 2>/dev/null && pwd)" || arg_fail "--dllama: no such folder"
    [[ -f $dllama/Makefile && -f $dllama/src/dllama.cpp ]] ||
        fail "--dllama $dllama has no Makefile and src/dllama.cpp (a distributed-llama checkout?)"
fi
tok_name=llama3; [[ $shape == tinyllama-1.1b ]] && tok_name=llama2
tok_dir="$root/models/cache/tokenizers/node_modules/@lenml/tokenizer-$tok_name/models"
[[ -f $tok_dir/tokenizer.json ]] || fail "the $tok_name tokenizer is missing: $tok_dir/tokenizer.json"
out_dir "$out" "$work"
out="$(cd "$out" && pwd)"; work="$(cd "$work" && pwd)"
t_start=$(date +%s) date_start=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# ------------------------------------------------------------------ setup
ensure_packages "$me" python3-numpy python3-h5py
meshinfer_bin
command -v taskset >/dev/null || fail "taskset (util-linux) is needed"
command -v cc >/dev/null || fail "a C compiler (cc) is needed for jobs/lib/llama_greedy.c"
ncores=$(nproc)
((ncores >= 2)) || say "warning: $ncores core(s): the 2-node/2-rank runs share a core"
core1=$((ncores >= 2 ? 1 : 0))
logs="$out/logs"; rm -rf "$logs"; mkdir -p "$logs"
lc_commit=$(commit_of "$llamacpp") dl_commit=""
greedy_bin="$work/llama_greedy"
cc -O2 -std=c11 -Wall -I "$llamacpp/include" -I "$llamacpp/ggml/include" "$root/jobs/lib/llama_greedy.c" \
    -o "$greedy_bin" -L "$lbin" -lllama -lggml -Wl,-rpath,"$lbin" 2> "$logs/llama_greedy-build.log" ||
    fail "building jobs/lib/llama_greedy.c against $llamacpp failed (see $logs/llama_greedy-build.log)"
dl_bin=""
if [[ -n $dllama ]]; then
    dl_commit=$(commit_of "$dllama")
    dl_bin=$(build_dllama "$dllama" "$work" "$logs") || exit 1
fi

# ------------------------------------------------------------------ the model
name="$shape-synth-seed$seed"
f16="$work/$name-f16.gguf" q4="$work/$name-$qt.gguf" q4h5="$work/$name-$qt.h5" f16h5="$work/$name-f16.h5"
gen_src=("$root/jobs/lib/synth_gguf.py" "$root"/tests/families/{families,hf_to_gguf,gguf_file,ggml_quants,vocab}.py)
stale() {  # stale FILE: missing or older than a source of the generator
    local s
    [[ -f $1 ]] || return 0
    for s in "${gen_src[@]}"; do [[ $s -nt $1 ]] && return 0; done
    return 1
}
write_f16() {
    say "writing $f16 ($shape shape, synthetic weights, seed $seed)"
    "$py" "$root/jobs/lib/synth_gguf.py" --shape "$shape" --out "$f16" --tokenizer "$tok_dir" --seed "$seed" \
        2> "$logs/synth_gguf.log" ||
        fail "jobs/lib/synth_gguf.py failed: $(tail -1 "$logs/synth_gguf.log")"
}
if stale "$q4"; then
    write_f16
    say "quantizing it with llama-quantize ${pure[*]} ... $qtype"
    "$lbin/llama-quantize" "${pure[@]}" "$f16" "$q4.partial" "$qtype" "$ncores" > "$logs/llama-quantize.log" 2>&1 ||
        fail "llama-quantize failed (see $logs/llama-quantize.log)"
    mv "$q4.partial" "$q4"
    rm -f "$q4h5"
fi
((conv_rounds > 0)) && [[ ! -f $f16 ]] && write_f16

# conversion: one wall time per conversion, the inputs read once before so that both are in the page cache
convert_csv="$out/convert.csv"
echo "input,gguf_bytes,round,seconds,status" > "$convert_csv"
if ((conv_rounds > 0)); then
    cat "$q4" "$f16" > /dev/null
    for ((r = 1; r <= conv_rounds; r++)); do
        order=("$qt" f16); ((r % 2 == 0)) && order=(f16 "$qt")
        for k in "${order[@]}"; do
            if [[ $k == "$qt" ]]; then src=$q4 dst=$q4h5; else src=$f16 dst=$f16h5; fi
            lg="$logs/convert-$k-round$r.txt"
            t0=$(date +%s.%N)
            if "$bin" convert --input "$src" --out "$dst" > "$lg" 2>&1; then
                s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
                st=ok; say "convert round $r: $k $s s"
            else
                s=""; st="failed: $(grep -m1 -i error "$lg" | cut -c1-160)"; say "convert round $r: $k FAILED ($lg)"
            fi
            echo "$k,$(stat -c %s "$src"),$r,$s,\"$st\"" >> "$convert_csv"
        done
    done
fi
rm -f "$f16" "$f16h5"  # 2.5 GB each; only the quantized files are kept
if [[ ! -f $q4h5 || $q4 -nt $q4h5 ]]; then
    "$bin" convert --input "$q4" --out "$q4h5" > "$logs/convert-$qt.txt" 2>&1 ||
        fail "meshinfer convert $q4 failed: $(grep -m1 -i error "$logs/convert-$qt.txt")"
fi

# ------------------------------------------------------------------ correctness
prompt="Once upon a time"
json_field() { "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
say "checks: the same tokens, logits and greedy continuation before anything is timed"
"$bin" tokenize -m "$q4h5" -p "$prompt" > "$logs/check-tokens.txt" 2> "$logs/check-tokens.stderr" ||
    fail "meshinfer tokenize failed (see $logs/check-tokens.stderr)"
ids=$(tr -s ' \n' ',,' < "$logs/check-tokens.txt" | sed 's/,$//')
n_prompt=$(tr ',' '\n' <<< "$ids" | grep -c .)
"$greedy_bin" "$q4" "$ids" "$n_check" "$prompt" > "$logs/check-llamacpp.json" 2> "$logs/check-llamacpp.stderr" ||
    fail "llama.cpp (jobs/lib/llama_greedy.c) failed on $q4: $(tail -1 "$logs/check-llamacpp.stderr")"
"$bin" logits -m "$q4h5" --tokens "$ids" > "$logs/check-meshinfer-logits.json" 2> "$logs/check-meshinfer-logits.stderr" ||
    fail "meshinfer logits failed (see $logs/check-meshinfer-logits.stderr)"
"$bin" generate -m "$q4h5" -p "$prompt" -n "$n_check" --ignore-eos --json > "$logs/check-meshinfer-greedy.json" \
    2> "$logs/check-meshinfer-greedy.stderr" || fail "meshinfer generate failed (see $logs/check-meshinfer-greedy.stderr)"
"$bin" info -m "$q4h5" --json > "$logs/check-meshinfer-info.json" 2> /dev/null || fail "meshinfer info $q4h5 failed"
# where the greedy tokens part (if they do): meshinfer's logits after the tokens they share
"$py" - "$logs/check-llamacpp.json" "$logs/check-meshinfer-greedy.json" "$ids" > "$logs/check-common.txt" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1]))["greedy"], json.load(open(sys.argv[2]))["tokens"]
n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
if n is not None:
    print(",".join([sys.argv[3]] + [str(t) for t in a[:n]]))
PY
if [[ -s $logs/check-common.txt ]]; then
    "$bin" logits -m "$q4h5" --tokens "$(cat "$logs/check-common.txt")" > "$logs/check-meshinfer-logits-diverge.json" \
        2>/dev/null || fail "meshinfer logits failed"
fi
"$py" "$root/jobs/lib/bench_gguf_report.py" check "$logs" "$ids" > "$out/checks.json" ||
    fail "llama.cpp and meshinfer disagree (see $out/checks.json and $logs/check-*)"
say "check: $("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["summary"])' "$out/checks.json")"

# --prefill: a prompt of exactly N tokens, BOS included (" the" is one token in both vocabularies)
pp_text=""
if ((prefill > 0)); then
    pp_text="the$(printf ' the%.0s' $(seq 2 $((prefill - 1))))"
    ((prefill == 2)) && pp_text="the"
    n_pp=$("$bin" tokenize -m "$q4h5" -p "$pp_text" 2> /dev/null | wc -w)
    [[ $n_pp == "$prefill" ]] ||
        fail "--prefill $prefill: the prompt \"the the ...\" gives $n_pp tokens with this tokenizer, not $prefill"
fi

dl_m="$work/$name-q40.m" dl_t="$work/llama3-tokenizer.t"
if [[ -n $dllama ]]; then
    if [[ ! -f $dl_m || $q4h5 -nt $dl_m || $root/jobs/lib/to_dllama.py -nt $dl_m ]]; then
        say "converting $q4h5 for distributed-llama"
        "$py" "$root/jobs/lib/to_dllama.py" -m "$q4h5" --weights q40 --model-out "$dl_m" --tokenizer-out "$dl_t" \
            --tokenizer-json "$tok_dir" --llama3-rope 32,1,4,8192 2> "$logs/convert-dllama.log" ||
            fail "to_dllama.py failed: $(tail -1 "$logs/convert-dllama.log")"
    fi
fi

# ------------------------------------------------------------------ runners
positions=$((n_prompt + gen))
# spec fields are separated by '|':
#   llamabench            llama-bench, 1 thread, GEN tokens
#   llamabench_pp         llama-bench, 1 thread, prompt processing of PREFILL tokens
#   mesh_pp               meshinfer bench, 1 rank, prefill of the PREFILL-token prompt (prompt tokens / TTFT)
#   dllama|NODES          distributed-llama, q40 weights, q80 buffers, POSITIONS positions
#   mesh|RANKS|TRANSPORT  meshinfer bench (none|tcp|shm), q8_0 messages with 2 ranks, POSITIONS positions
mpi_transport() {
    case "$1" in
        tcp) echo "--mca btl self,tcp --mca btl_tcp_if_include lo --mca osc pt2pt" ;;
        shm) echo "--mca btl self,vader" ;;
    esac
}
dl_args() { echo "inference --model $dl_m --tokenizer $dl_t --buffer-float-type q80 --nthreads 1 --steps $1 --temperature 0 --seed 1"; }
mesh_args() { echo "bench -m $q4h5 --prompt \"$prompt\" --steps $positions --repeat 1 --no-baseline --stream-mb 16 --json"; }
cmd_of() {  # the command a spec runs, for the table
    local -a f; IFS='|' read -r -a f <<< "$1"
    case "${f[0]}" in
        llamabench) echo "taskset -c 0 $lbin/llama-bench -m $q4 -t 1 -p 0 -n $gen -r 1 -o json" ;;
        llamabench_pp) echo "taskset -c 0 $lbin/llama-bench -m $q4 -t 1 -p $prefill -n 0 -r 1 -o json" ;;
        mesh_pp) echo "taskset -c 0 $bin bench -m $q4h5 --prompt \"the the ... (${prefill} tokens)\" --steps $((prefill + 1)) --repeat 1 --no-baseline --stream-mb 16 --json" ;;
        dllama)
            local c; c="$dl_bin $(dl_args "$positions") --prompt \"$prompt\""
            if ((f[1] == 1)); then echo "taskset -c 0 $c"
            else echo "taskset -c $core1 $dl_bin worker --port $port --nthreads 1 & taskset -c 0 $c --workers 127.0.0.1:$port"; fi ;;
        mesh)
            if ((f[1] == 1)); then echo "taskset -c 0 $bin $(mesh_args)"
            else echo "mpirun --allow-run-as-root -q -np ${f[1]} --bind-to core $(mpi_transport "${f[2]}") -x OPENBLAS_NUM_THREADS=1 $bin $(mesh_args) --wire-dtype q8_0 --planner tp"; fi ;;
    esac
}
# The distributed-llama worker: its PID is also kept in a file, so that an
# interrupted run still stops it (that PID only).
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
dl_field() {  # dl_field LOG Evaluation|Prediction nTokens|tokens/s
    awk -v sec="$2" -v key="$3" '$1 == sec {s = 1; next} s && $1 == key":" {print $2; exit}' "$1"
}
dl_error() { cat "$1" "$1.stderr" 2>/dev/null | grep -a -m1 -E "Assertion|Critical error|rror" | sed 's/^[^A-Za-z]*//' | cut -c1-160; }
run_dllama() {  # run_dllama NODES POSITIONS LOG
    local -a args; read -r -a args <<< "$(dl_args "$2")"
    args+=(--prompt "$prompt")
    if (($1 > 1)); then
        if command -v ss >/dev/null && [[ -n $(ss -Hltn "sport = :$port" 2>/dev/null) ]]; then
            echo "port $port is already in use (--port)" > "$3.err"; return 1
        fi
        taskset -c "$core1" "$dl_bin" worker --port "$port" --nthreads 1 > "$3.worker" 2>&1 &
        worker_pid=$!; echo "$worker_pid" > "$worker_pidfile"
        wait_listen || { stop_worker; echo "the worker did not start (see $3.worker)" > "$3.err"; return 1; }
        args+=(--workers "127.0.0.1:$port")
    fi
    local rc=0
    timeout 900 taskset -c 0 "$dl_bin" "${args[@]}" > "$3" 2> "$3.stderr" || rc=$?
    stop_worker
    local v; v=$(dl_field "$3" Prediction tokens/s)
    if ((rc != 0)) || [[ -z $v ]]; then
        echo "dllama exited with $rc: $(dl_error "$3")" > "$3.err"; return 1
    fi
    echo "$v"
}
# run_spec SPEC LOG: prints tokens/s, or fails with the reason in $LOG.err
run_spec() {
    local -a f; IFS='|' read -r -a f <<< "$1"; local lg=$2 rc=0
    case "${f[0]}" in
        llamabench)
            taskset -c 0 "$lbin/llama-bench" -m "$q4" -t 1 -p 0 -n "$gen" -r 1 -o json > "$lg" 2> "$lg.stderr" || rc=$?
            ((rc == 0)) || { echo "llama-bench exited with $rc: $(grep -m1 -i error "$lg.stderr" | cut -c1-160)" > "$lg.err"; return 1; }
            "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["avg_ts"])' "$lg" 2> "$lg.err" ;;
        llamabench_pp)
            taskset -c 0 "$lbin/llama-bench" -m "$q4" -t 1 -p "$prefill" -n 0 -r 1 -o json > "$lg" 2> "$lg.stderr" || rc=$?
            ((rc == 0)) || { echo "llama-bench exited with $rc: $(grep -m1 -i error "$lg.stderr" | cut -c1-160)" > "$lg.err"; return 1; }
            "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["avg_ts"])' "$lg" 2> "$lg.err" ;;
        mesh_pp)
            OPENBLAS_NUM_THREADS=1 taskset -c 0 "$bin" bench -m "$q4h5" --prompt "$pp_text" --steps $((prefill + 1)) \
                --repeat 1 --no-baseline --stream-mb 16 --json > "$lg" 2> "$lg.stderr" || rc=$?
            ((rc == 0)) || { echo "meshinfer exited with $rc: $(grep -m1 -i error "$lg.stderr" | cut -c1-160)" > "$lg.err"; return 1; }
            "$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); print("%.2f" % (d["prompt_tokens"] / d["ttft_ms"] * 1e3))' \
                "$lg" 2> "$lg.err" ;;
        dllama) run_dllama "${f[1]}" "$positions" "$lg" ;;
        mesh)
            local -a m=("$bin" bench -m "$q4h5" --prompt "$prompt" --steps "$positions" --repeat 1 --no-baseline
                        --stream-mb 16 --json)
            if ((f[1] == 1)); then
                OPENBLAS_NUM_THREADS=1 taskset -c 0 "${m[@]}" > "$lg" 2> "$lg.stderr" || rc=$?
            else
                # shellcheck disable=SC2046
                mpirun --allow-run-as-root -q -np "${f[1]}" --bind-to core $(mpi_transport "${f[2]}") \
                    -x OPENBLAS_NUM_THREADS=1 "${m[@]}" --wire-dtype q8_0 --planner tp > "$lg" 2> "$lg.stderr" || rc=$?
            fi
            ((rc == 0)) || { echo "meshinfer exited with $rc: $(grep -m1 -i error "$lg.stderr" | cut -c1-160)" > "$lg.err"; return 1; }
            json_field "$lg" decode_tokens_per_s ;;
    esac
}

if [[ -n $dllama ]]; then
    run_dllama 1 $((n_prompt + n_check)) "$logs/check-dllama.txt" > /dev/null ||
        fail "distributed-llama: $(cat "$logs/check-dllama.txt.err")"
    [[ $(dl_field "$logs/check-dllama.txt" Evaluation nTokens) == $((n_prompt - 1)) ]] ||
        fail "distributed-llama did not encode \"$prompt\" into the $n_prompt tokens we do (see $logs/check-dllama.txt)"
    "$py" "$root/jobs/lib/bench_gguf_report.py" check-dllama "$logs" "$out/checks.json" "$tok_dir" ||
        fail "distributed-llama's greedy text differs from both meshinfer's and llama.cpp's within 4 tokens (see $logs/check-dllama.txt)"
    say "check: $("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["dllama"]["summary"])' "$out/checks.json")"
fi

# ------------------------------------------------------------------ comparisons
cmp_ids=()
declare -A cmp_label cmp_specs
add_cmp() { local id=$1; cmp_ids+=("$id"); cmp_label[$id]=$2; shift 2; cmp_specs[$id]=$(printf '%s\n' "$@"); }
if ((prefill > 0)); then
    add_cmp a "1 thread, 1 process: prompt processing of $prefill tokens, llama.cpp llama-bench -p $prefill vs meshinfer bench ($shape shape, $qtype GGUF / converted)" \
        "llamabench_pp" "mesh_pp"
else
    add_cmp a "1 thread, 1 process: llama.cpp llama-bench vs meshinfer bench ($shape shape, $qtype GGUF / converted)" \
        "llamabench" "mesh|1|none"
fi
if [[ -n $dllama ]]; then
    add_cmp b1 "1 thread: distributed-llama 1 node vs meshinfer 1 rank (q40 / q4_0 weights, 8-bit activations)" \
        "dllama|1" "mesh|1|none"
    add_cmp b2 "2 nodes / 2 ranks (tp), 1 thread each, q8 messages" "dllama|2" "mesh|2|tcp" "mesh|2|shm"
fi
((prefill > 0)) || add_cmp c "meshinfer 2 ranks (tp, q8_0 messages, shared memory) vs 1 rank" "mesh|1|none" "mesh|2|shm"
side_name() {
    local -a f; IFS='|' read -r -a f <<< "$1"
    case "${f[0]}" in
        llamabench) echo "llama.cpp llama-bench" ;;
        llamabench_pp) echo "llama.cpp llama-bench pp$prefill" ;;
        mesh_pp) echo "meshinfer 1 rank prefill $prefill" ;;
        dllama) ((f[1] == 1)) && echo "distributed-llama 1 node" || echo "distributed-llama 2 nodes (tcp)" ;;
        mesh) ((f[1] == 1)) && echo "meshinfer 1 rank" ||
            echo "meshinfer ${f[1]} ranks tp ($([[ ${f[2]} == tcp ]] && echo tcp || echo shared memory))" ;;
    esac
}
csv="$out/gguf.csv"
echo "comparison,program,round,tokens_per_s,status,spec" > "$csv.partial"
# CPU use by others: the share of all cores busy during one second in which this script sleeps
cpu_sample() { awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6}' /proc/stat; }
read -r b0 i0 < <(cpu_sample); sleep 1; read -r b1 i1 < <(cpu_sample)
busy=$(awk -v b=$((b1 - b0)) -v i=$((i1 - i0)) 'BEGIN {printf "%.2f", (b + i) ? b / (b + i) : 0}')
awk -v x="$busy" 'BEGIN {exit !(x > 0.05)}' &&
    say "warning: $(awk -v x="$busy" 'BEGIN {printf "%.0f", 100 * x}')% of the CPU was busy with other work just before timing"
declare -A failed
for id in "${cmp_ids[@]}"; do
    mapfile -t specs <<< "${cmp_specs[$id]}"
    say "comparison $id: ${cmp_label[$id]} ($rounds rounds)"
    for ((r = 1; r <= rounds; r++)); do
        order=("${!specs[@]}")
        ((r % 2 == 0)) && mapfile -t order < <(printf '%s\n' "${!specs[@]}" | tac)
        for i in "${order[@]}"; do
            s=${specs[$i]} nm=$(side_name "${specs[$i]}")
            [[ -n ${failed[$id.$i]:-} ]] && continue
            lg="$logs/$id-$i-round$r.txt"
            if v=$(run_spec "$s" "$lg"); then
                st=ok; say "  round $r: $nm $v tokens/s"
            else
                v=""; st="failed: $(cat "$lg.err")"; failed[$id.$i]=1
                say "  round $r: $nm FAILED: $(cat "$lg.err") (not run again)"
            fi
            printf '%s,"%s",%d,%s,"%s","%s"\n' "$id" "$nm" "$r" "$v" "${st//\"/\'}" "$s" >> "$csv.partial"
        done
    done
done
mv "$csv.partial" "$csv"

# ------------------------------------------------------------------ report
t_end=$(date +%s)
cmds_txt=$(for id in "${cmp_ids[@]}"; do while IFS= read -r s; do printf '%s\t%s\n' "$s" "$(cmd_of "$s")"; done <<< "${cmp_specs[$id]}"; done)
labels_txt=$(for id in "${cmp_ids[@]}"; do printf '%s\t%s\n' "$id" "${cmp_label[$id]}"; done)
meta=$("$py" - <<PY
import json, platform
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(json.dumps({"date_utc": "$date_start", "cpu": cpu, "cores": $ncores, "kernel": platform.release(),
  "cpu_busy_before_timing": float("$busy"), "seconds": $((t_end - t_start)),
  "meshinfer_commit": "$(commit_of "$root")", "llamacpp_commit": "$lc_commit", "dllama_commit": "$dl_commit",
  "rounds": $rounds, "gen": $gen, "positions": $positions, "prompt": "$prompt", "prompt_tokens": $n_prompt,
  "convert_rounds": $conv_rounds, "seed": $seed, "model": "$name", "gguf": "$q4", "convert": "$bin convert --input X.gguf --out X.h5",
  "shape": "$shape", "tokenizer": "$tok_name", "type": "$qtype", "pure": ${#pure[@]}, "prefill": $prefill}))
PY
)
"$py" "$root/jobs/lib/bench_gguf_report.py" report "$out" "$meta" "$cmds_txt" "$labels_txt" "$root"
say "wrote $csv, $convert_csv, $out/gguf.md, $out/gguf.json and logs/ ($((t_end - t_start)) s)"
