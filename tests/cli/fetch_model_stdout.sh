#!/usr/bin/env bash
# jobs/dev/fetch_model.sh prints only the converted model's path on stdout (the
# quickstart uses it), also on the run that converts. Uses the cached files,
# so nothing is downloaded.
# usage: fetch_model_stdout.sh MESHINFER REPO_ROOT
set -u
bin=$1 root=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp "$root/models/cache/stories15M.bin" "$root/models/cache/tokenizer.bin" "$tmp/"
out=$(MESHINFER_BIN="$bin" MESHINFER_CACHE="$tmp" "$root/jobs/dev/fetch_model.sh" 2>/dev/null)
if [[ "$out" == "$tmp/stories15M.h5" && -f "$tmp/stories15M.h5" ]]; then
    echo "ok: converting run prints only the model path"; echo "1 passed, 0 failed"
else
    echo "FAIL: stdout was: $out"; echo "0 passed, 1 failed"; exit 1
fi
