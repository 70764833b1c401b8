# Sourced by the benchmarks that run other programs beside meshinfer
# (jobs/experiments/bench_gguf.sh, bench_reference.sh): the commit a checkout
# is at, and distributed-llama built from a read-only checkout.

# commit_of DIR: the short commit of a git checkout, "+modified" when its
# tracked files differ from it, "unknown" outside git
commit_of() {
    local c
    c=$(git -C "$1" rev-parse --short HEAD 2>/dev/null) || { echo "unknown"; return; }
    [[ -z $(git -C "$1" status --porcelain --untracked-files=no 2>/dev/null) ]] || c="$c+modified"
    echo "$c"
}

# build_dllama SRC WORK LOGS: distributed-llama's Makefile and src/ copied to
# WORK/dllama and built there (the checkout is only read); prints the binary's path
build_dllama() {
    rm -rf "$2/dllama"; mkdir -p "$2/dllama"
    cp -r "$1/Makefile" "$1/src" "$2/dllama/"
    echo "building distributed-llama ($1, $(commit_of "$1")) in $2/dllama" >&2
    make -C "$2/dllama" -j "$(nproc)" dllama > "$3/dllama-build.log" 2>&1 ||
        fail "building distributed-llama failed (see $3/dllama-build.log)"
    echo "$2/dllama/dllama"
}
