# shellcheck shell=bash
# What every script in jobs/ shares; sourced first thing:
#   . "$(dirname "$0")/../lib/common.sh"     (jobs/dev, jobs/testbed, jobs/experiments)
# Sourcing it sets `root` (the repository) and `me` (the script's name in
# messages), and answers -h/--help as the first argument with the script's
# header comment. Then:
#   fail MSG          one line "ME: error: MSG" on stderr, exit $fail_status (default 1)
#   say MSG           one line "ME: MSG" on stderr
#   need_value "$@"   in an option loop, before `x=$2; shift 2`: an option given
#                     without its value (none, or the next option) is one error
#                     line, not bash's own
#   bad_option OPT    the error for an unknown option
#   Option values, checked right after the loop, before any work (each refusal
#   one line naming the option, exit 2 whatever fail_status is):
#   opt_int OPT V LO HI     V a whole number in [LO, HI]
#   opt_num OPT V LO HI     V a decimal number (digits, maybe a fraction) in [LO, HI]
#   opt_port OPT V [SPAN]   V a TCP port, 1-65535, with SPAN more above it (default 0)
#   opt_pct OPT V [LO]      V a percentage, a number in [LO, 100] (LO default 0)
#   opt_ints / opt_nums OPT LIST LO HI   each of a space- or comma-separated list
#   opt_file OPT V          V an existing readable regular file (not a directory)
#   arg_fail MSG            the same refusal for a script's own checks
#   usage             print the header comment
#   meshinfer_bin     set and export `bin` (MESHINFER_BIN, else build/meshinfer,
#                     built by jobs/dev/build.sh only when it is missing)
#   netem_bin         set `netem`: mi_netem beside `bin`, else build/mi_netem (built when missing)
#   real_model        when `model` is empty, set it to stories15M.h5 (fetched when
#                     missing); then check it as check_model does
#   check_model FILE  refuse a model that is missing, unreadable or a directory
#   check_model_args ARGS...  refuse a directory as the value of -m/--model in
#                     meshinfer's arguments (a missing file meshinfer reports itself)
#   out_dir DIR...    create each folder and check it is one and writable
#   json FILE|- EXPR  print a JS expression of the parsed JSON `j` (jobs/lib/json.js)
#   file_mb FILE      a file's size in MB, one decimal
#   plot_png FILE W,H gnuplot script on stdin drawn into FILE, whole or not at all
#   mpi ARGS...       mpirun for ranks sharing this machine's cores
# It sets no shell options: each script keeps its own (most `set -euo pipefail`;
# the quality tools in jobs/dev go on past a failing step and report it).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
me="$(basename "$0" .sh)"
fail_status=1

# The header comment: from line 2 to the first line that is not a comment (a
# batch script's #SBATCH lines end it too).
usage() { awk 'NR > 1 && /^#SBATCH/ {exit} NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }
fail() { echo "$me: error: $*" >&2; exit "$fail_status"; }
say() { echo "$me: $*" >&2; }
# a wrong command line exits 2 (as getopt-style tools do), what fails later fail_status
arg_fail() { echo "$me: error: $*" >&2; exit 2; }
need_value() {
    (($# >= 2)) || arg_fail "$1 needs a value (see --help)"
    [[ $2 != --* ]] || arg_fail "$1 needs a value, not the option '$2' (see --help)"
}
bad_option() { arg_fail "unknown option '$1' (see --help)"; }
# (no leading zeros: bash's arithmetic would read 08 as octal; at most 9 digits: it never overflows)
opt_int() {
    [[ $2 =~ ^(0|[1-9][0-9]{0,8})$ ]] && (($2 >= $3 && $2 <= $4)) ||
        arg_fail "$1 '$2' is not a whole number from $3 to $4"
}
opt_num() {
    [[ $2 =~ ^([0-9]{1,9}([.][0-9]*)?|[.][0-9]+)([eE][-+]?[0-9]{1,3})?$ ]] && awk -v v="$2" -v lo="$3" -v hi="$4" 'BEGIN {exit !(v + 0 >= lo && v + 0 <= hi)}' ||
        arg_fail "$1 '$2' is not a number from $3 to $4"
}
opt_port() {
    local span=${3:-0}
    [[ $2 =~ ^[1-9][0-9]{0,8}$ ]] && (($2 + span <= 65535)) && return 0
    ((span)) && arg_fail "$1 '$2' is not a TCP port from 1 to $((65535 - span)) (the $((span + 1)) ports from it must be at most 65535)"
    arg_fail "$1 '$2' is not a TCP port from 1 to 65535"
}
opt_pct() { opt_num "$1" "$2" "${3:-0}" 100; }
opt_ints() {
    local v vs
    read -r -a vs <<< "${2//,/ }"
    ((${#vs[@]})) || arg_fail "$1 is an empty list"
    for v in "${vs[@]}"; do opt_int "$1" "$v" "$3" "$4"; done
}
opt_nums() {
    local v vs
    read -r -a vs <<< "${2//,/ }"
    ((${#vs[@]})) || arg_fail "$1 is an empty list"
    for v in "${vs[@]}"; do opt_num "$1" "$v" "$3" "$4"; done
}
opt_file() {
    [[ -n $2 ]] || arg_fail "$1: the path is empty"
    [[ ! -d $2 ]] || arg_fail "$1 '$2' is a directory, not a file"
    [[ -f $2 && -r $2 ]] || arg_fail "$1 '$2' is not a readable file"
}
# a --lock FILE (may be empty: no lock): a file, and flock to take it
opt_lock() {
    [[ -n $2 ]] || return 0
    [[ ! -d $2 ]] || arg_fail "$1 '$2' is a folder, not a lock file"
    command -v flock > /dev/null || arg_fail "$1 needs flock (util-linux)"
}
# a comma or space list of planner names, each one of the allowed ones ($3...)
opt_planners() {
    local opt=$1 p ps ok; shift
    local list=$1; shift
    read -r -a ps <<< "${list//,/ }"
    ((${#ps[@]})) || arg_fail "$opt is an empty list"
    for p in "${ps[@]}"; do
        ok=0
        for a in "$@"; do [[ $p == "$a" ]] && ok=1; done
        ((ok)) || arg_fail "$opt: unknown planner '$p' ($*)"
    done
}
# (the caller's arguments are still "$@" while it sources this file)
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then usage; exit 0; fi

meshinfer_bin() {
    if [[ -n "${MESHINFER_BIN:-}" ]]; then
        bin=$MESHINFER_BIN
        [[ -f "$bin" && -x "$bin" ]] || fail "$bin is not an executable (MESHINFER_BIN)"
    else
        bin="$root/build/meshinfer"
        if [[ ! -x "$bin" ]]; then
            say "$bin is missing; building it (jobs/dev/build.sh)"
            "$root/jobs/dev/build.sh"
        fi
        [[ -x "$bin" ]] || fail "$bin was not built (jobs/dev/build.sh)"
    fi
    # scripts and testbeds this one starts run the same binary and build nothing
    export MESHINFER_BIN="$bin"
}

netem_bin() {
    netem="$(dirname "$bin")/mi_netem"
    [[ -x "$netem" ]] || netem="$root/build/mi_netem"
    if [[ ! -x "$netem" ]]; then
        # mi_netem is only built where libnetfilter-queue is installed
        . "$root/jobs/lib/packages.sh"
        ensure_packages "$me" libnetfilter-queue-dev
        say "$netem is missing; building it"
        { cmake -S "$root" -B "$root/build" && cmake --build "$root/build" --target mi_netem; } > /dev/null ||
            fail "could not build mi_netem (cmake --build build --target mi_netem)"
    fi
}

check_model() {
    [[ -n "$1" ]] || fail "the model's path is empty"
    [[ ! -d "$1" ]] || fail "model '$1' is a directory; give a model file (.h5)"
    [[ -f "$1" && -r "$1" ]] || fail "model '$1' not found (jobs/dev/fetch_model.sh or meshinfer synth)"
}

# A testbed checks the model it is given before it sets anything up.
check_model_args() {
    local a prev=""
    for a in "$@"; do
        [[ ($prev == -m || $prev == --model) && -d $a ]] && check_model "$a"
        prev=$a
    done
    return 0
}

# The real model, fetched (and converted with `bin`) when it is not there yet;
# a model the user named is only checked, never replaced by the default.
real_model() {
    model=${model:-}
    if [[ -z "$model" ]]; then
        model="$root/models/cache/stories15M.h5"
        [[ -f "$model" ]] && return 0
        [[ -n "${bin:-}" ]] || meshinfer_bin # (the fetch converts with it)
        say "$model is missing; fetching it (jobs/dev/fetch_model.sh)"
        model="$("$root/jobs/dev/fetch_model.sh")" || fail "could not fetch the real model"
    fi
    check_model "$model"
}

out_dir() {
    local d
    for d in "$@"; do
        [[ -n "$d" ]] || fail "an output folder's path is empty"
        [[ ! -e "$d" || -d "$d" ]] || fail "output folder '$d' is a file"
        mkdir -p -- "$d" 2> /dev/null || fail "cannot create the output folder '$d'"
        [[ -w "$d" ]] || fail "output folder '$d' is not writable"
    done
}

file_mb() { stat -c %s -- "$1" | awk '{printf "%.1f\n", $1 / 1e6}'; }
json() { node "$root/jobs/lib/json.js" "$@"; }

# plot_png FILE W,H [FONT]: gnuplot reads the rest of its script from stdin;
# the picture is drawn under a temporary name and renamed when complete.
plot_png() {
    command -v gnuplot > /dev/null || fail "gnuplot is not installed (apt-get install gnuplot-nox)"
    local png=$1 size=$2 font=${3:-,10}
    { printf 'set terminal pngcairo size %s font "%s"\nset output "%s.partial"\n' "$size" "$font" "$png"; cat; } |
        gnuplot || { rm -f "$png.partial"; fail "gnuplot could not draw $png"; }
    mv "$png.partial" "$png"
}

mpi() { mpirun --allow-run-as-root -q --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 "$@"; }
