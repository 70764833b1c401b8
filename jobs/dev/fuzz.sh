#!/usr/bin/env bash
# Fuzz every parser of outside input with libFuzzer (clang, AddressSanitizer,
# UndefinedBehaviorSanitizer): cluster files (and every planner on what
# parses), plan files, tokenizer.bin, tokenizer.json (loaded, encoding its own
# text, its stored form read back), llama2.c checkpoint headers, the side
# files (importance, somegather quality, generation journals), GGUF files and
# safetensors files and folder indexes (the importers' readers), HDF5 model
# files (the loader, as `meshinfer check` runs it: its seeds are small
# synthetic models the harness writes into BUILD/seeds/hdf5, since the
# repository keeps no model files), the command line (every one-device
# command run on argument lists, in a scratch directory) and meshinfer
# serve's request bodies with its stop-string streamer. Starts
# from the seed corpus in fuzz/corpus/HARNESS/ (new inputs that reach new
# code go to BUILD/corpus/HARNESS, the repository's seeds stay as they are);
# a crash is saved as BUILD/crash-HARNESS-* and makes the run fail: fix it and
# keep the input in fuzz/corpus/HARNESS/ as a regression seed.
#
# usage: jobs/dev/fuzz.sh [--seconds N] [--jobs N] [--build-dir DIR] [HARNESS...]
#   --seconds N      per harness (default 60; the test suite runs 5)
#   --jobs N         harnesses fuzzed at once, each on one core (default 1;
#                    the test suite runs 2)
#   --build-dir DIR  the clang tree (default build-fuzz)
#   HARNESS          cluster plan tokenizer tokenizer_json checkpoint sidefiles gguf safetensors hdf5 cmdline
#                    openai (default all)
set -uo pipefail
. "$(dirname "$0")/../lib/common.sh"
fail_status=2
dir="$root/build-fuzz" seconds=60 jobs=1 harnesses=()
while (($#)); do
    case "$1" in
        --seconds) need_value "$@"; opt_int "$1" "$2" 1 999999999; seconds=$2; shift 2 ;;
        --jobs) need_value "$@"; opt_int "$1" "$2" 1 64; jobs=$2; shift 2 ;;
        --build-dir) need_value "$@"
                     dir=$(realpath -m -- "$2"); shift 2 ;; # the runs happen inside it
        cluster|plan|tokenizer|tokenizer_json|checkpoint|sidefiles|gguf|safetensors|hdf5|cmdline|openai) harnesses+=("$1"); shift ;;
        *) bad_option "$1" ;;
    esac
done
((${#harnesses[@]})) || harnesses=(cluster plan tokenizer tokenizer_json checkpoint sidefiles gguf safetensors hdf5 cmdline openai)
command -v clang > /dev/null || { echo "fuzz: clang is not installed (apt-get install clang): skipped" >&2; exit 77; }
flags="-g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
echo "fuzz: building $dir with clang" >&2
mkdir -p "$dir"
CC=clang cmake -S "$root" -B "$dir" -DMESHINFER_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > "$dir/build.log" 2>&1 &&
    cmake --build "$dir" -j2 --target $(printf 'fuzz_%s ' "${harnesses[@]}") >> "$dir/build.log" 2>&1 ||
    { fail_status=1; fail "build failed (see $dir/build.log)"; }
export UBSAN_OPTIONS=print_stacktrace=1
# one harness; its verdict line on stdout, status 1 on a finding
fuzz_one() {
    local h=$1 seeds opts rss
    mkdir -p "$dir/corpus/$h" "$root/fuzz/corpus/$h"
    seeds=() opts=(-max_len=65536 -timeout=10) rss=4096
    # libhdf5 is not ours and not instrumented: its own over-reads are
    # suppressed (fuzz/hdf5.supp) so the search continues into our loader
    export ASAN_OPTIONS=detect_leaks=0:suppressions="$root/fuzz/hdf5.supp"
    case "$h" in
        hdf5) mkdir -p "$dir/seeds/hdf5"
              MESHINFER_FUZZ_SEEDS="$dir/seeds/hdf5" "$dir/fuzz_hdf5" > /dev/null 2>&1 ||
                  { echo "FAIL: hdf5: could not write the seed models"; return 1; }
              # a corrupt size makes libhdf5 ask malloc for gigabytes to terabytes:
              # return NULL at once, as a real allocator out of memory does (HDF5
              # then fails the open), instead of ASan's and libFuzzer's aborts on
              # huge requests, or ASan mapping shadow memory for one for seconds
              # (a 15 s "timeout" the normal build answers in 0.3 s)
              export ASAN_OPTIONS=$ASAN_OPTIONS:allocator_may_return_null=1:max_allocation_size_mb=2048
              seeds=("$dir/seeds/hdf5") opts=(-max_len=150000 -timeout=10 -malloc_limit_mb=1048576) ;;
        # a command ended by mi_fatal returns by longjmp and leaks what it held (up to a
        # megabyte or two, the tiny model and the session): about 2 GB in 15 minutes
        cmdline) opts=(-max_len=512 -timeout=30 -close_fd_mask=3) rss=12288 ;;
    esac
    echo "fuzz: $h for $seconds s" >&2
    if (cd "$dir" && "./fuzz_$h" -max_total_time="$seconds" "${opts[@]}" -rss_limit_mb=$rss \
            -artifact_prefix="$dir/crash-$h-" "$dir/corpus/$h" "$root/fuzz/corpus/$h" "${seeds[@]}" > "$dir/fuzz-$h.log" 2>&1); then
        echo "ok: $h: $(grep -o 'Done [0-9]* runs' "$dir/fuzz-$h.log" | tail -1) without a finding"
    else
        local input verdict
        input=$(ls "$dir"/crash-"$h"-* "$dir"/timeout-"$h"-* "$dir"/oom-"$h"-* 2>/dev/null | head -1)
        # a fault raised inside libhdf5 itself does not fail the run (jobs/dev/fuzz_finding.sh)
        if verdict=$("$root/jobs/dev/fuzz_finding.sh" "$h" "$dir/fuzz-$h.log"); then
            echo "ok: $h: $verdict (input: $input)"
            return 0
        fi
        echo "FAIL: $h: ${verdict%%$'\n'*} (input: $input)"
        [[ $verdict == *$'\n'* ]] && echo "${verdict#*$'\n'}"
        return 1
    fi
}
fail=0
# harnesses in parallel (--jobs), each verdict in a file, printed in order
for ((i = 0; i < ${#harnesses[@]}; i += jobs)); do
    pids=()
    for h in "${harnesses[@]:i:jobs}"; do
        fuzz_one "$h" > "$dir/verdict-$h" & pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || fail=1; done
    for h in "${harnesses[@]:i:jobs}"; do cat "$dir/verdict-$h"; done
done
exit $fail
