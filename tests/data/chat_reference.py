#!/usr/bin/python3
"""Second reference for tests/data/chat_reference.js: renders chat templates
with Python's Jinja2 (Debian's python3-jinja2) set up the way transformers'
apply_chat_template sets it up: a sandboxed environment with trim_blocks and
lstrip_blocks, the loopcontrols extension, a raise_exception global, a
strftime_now global on local time and a tojson filter that keeps non-ASCII.
This is the engine the families' templates were written for; it keeps
Python's string semantics where @huggingface/jinja differs (strip('\\n'),
"" != false, which whitespace strip() removes).

Reads one JSON object a line on stdin: {"template": PATH, "vars": {...}};
prints one line each: the rendering as a JSON string, or {"error": MSG} when
the template raises. Exit 3 when jinja2 is not installed."""
import datetime
import json
import sys

try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(3)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    compiled = {}
    for line in sys.stdin:
        case = json.loads(line)
        path = case["template"]
        if path not in compiled:
            with open(path, encoding="utf-8") as f:
                compiled[path] = env.from_string(f.read())
        try:
            out = compiled[path].render(**case["vars"])
        except jinja2.exceptions.TemplateError as e:
            out = {"error": str(e)}
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
