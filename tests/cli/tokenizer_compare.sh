#!/usr/bin/env bash
# Checks tests/data/tokenizer_expected.tsv against the live reference tokenizer
# (llama-tokenizer-js@1.2.2), so the committed fixture cannot drift from it.
#
# Usage: tests/cli/tokenizer_compare.sh [MODULE_DIR]
#   MODULE_DIR: node_modules dir (or the package dir) holding
#   llama-tokenizer-js; default $LLAMA_TOKENIZER_JS_DIR, else
#   <repo>/.cache/npm/node_modules. NODE_PATH is also searched.
# Exit: 0 identical, 1 different or the reference script failed,
#       77 skipped (node or the npm package is unavailable).
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
data=$root/tests/data
moddir=${1:-${LLAMA_TOKENIZER_JS_DIR:-$root/.cache/npm/node_modules}}
expected=$data/tokenizer_expected.tsv

if ! command -v node >/dev/null 2>&1; then
    echo "tokenizer_compare: SKIP: node not found"
    exit 77
fi

tmp=$(mktemp "${TMPDIR:-/tmp}/tokenizer_ref.XXXXXX") || exit 1
trap 'rm -f "$tmp"' EXIT

node "$data/tokenizer_reference.js" "$tmp" "$moddir"
rc=$?
if [ "$rc" -eq 3 ]; then
    echo "tokenizer_compare: SKIP: llama-tokenizer-js@1.2.2 not available"
    exit 77
elif [ "$rc" -ne 0 ]; then
    echo "tokenizer_compare: FAIL: reference script exited with $rc"
    exit 1
fi

if diff -u "$expected" "$tmp"; then
    echo "tokenizer_compare: OK: $(grep -vc '^#' "$expected") strings match llama-tokenizer-js"
    exit 0
fi
echo "tokenizer_compare: FAIL: $expected differs from llama-tokenizer-js output (see diff above);"
echo "  regenerate with: node tests/data/tokenizer_reference.js tests/data/tokenizer_expected.tsv $moddir"
exit 1
