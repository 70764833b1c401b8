#!/usr/bin/env python3
"""The layering test: every layer only looks down, and no files call in a circle.

usage: layering.py SRC_DIR LAYER=ARCHIVE [LAYER=ARCHIVE ...]   (lowest layer first)

From the built static libraries (nm), one per layer, in the order given:
  1. no object calls or reads a symbol defined in a higher layer's library;
  2. no circle of object files (source files) calling each other, in any layer;
  3. only the runtime's objects reference MPI;
  4. every public header (include/meshinfer/*.h) declares functions of one
     layer only, and every function it declares is defined somewhere;
  5. no source file includes a header of a higher layer (public or internal).
Prints one line per violation and exits 1, or prints a summary and exits 0.
"""
import os
import re
import subprocess
import sys

GLOBAL_DEF = set("TDBRCVWG")


def objects(layer, archive):
    """{object: (defined symbols, undefined symbols)} of one archive."""
    out = subprocess.run(["nm", "-A", archive], capture_output=True, text=True, check=True).stdout
    objs = {}
    for line in out.splitlines():
        head, _, rest = line.rpartition(": ") if ": " in line else ("", "", "")
        m = re.match(r"(.*):([^:]+\.o):\s*(.*)$", line)
        if not m:
            continue
        obj = m.group(2)
        parts = m.group(3).split()
        d, u = objs.setdefault(obj, (set(), set()))
        if len(parts) == 2 and parts[0] == "U":
            u.add(parts[1])
        elif len(parts) == 3 and parts[1] in GLOBAL_DEF:
            d.add(parts[2])
    return objs


def source_name(layer, obj):
    """src/<layer>/<file>.c for an object file name (CMake names them <file>.c.o)."""
    return "src/%s/%s" % (layer, obj[:-2] if obj.endswith(".c.o") else obj)


def tarjan(graph):
    index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sccs


def main():
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) > 1 else 2
    src = sys.argv[1]
    order, archives = [], {}
    for arg in sys.argv[2:]:
        layer, archive = arg.split("=", 1)
        order.append(layer)
        archives[layer] = archive
    rank = {l: i for i, l in enumerate(order)}
    errors = []

    owner, defs, undefs = {}, {}, {}
    for layer in order:
        for obj, (d, u) in objects(layer, archives[layer]).items():
            name = source_name(layer, obj)
            owner[name] = layer
            undefs[name] = u
            for s in d:
                defs.setdefault(s, name)

    graph = {}
    for name, us in undefs.items():
        for s in sorted(us):
            if s in defs and defs[s] != name:
                target = defs[s]
                graph.setdefault(name, set()).add(target)
                if rank[owner[target]] > rank[owner[name]]:
                    errors.append("%s (layer %s) uses %s from %s (layer %s): a layer may only call the ones "
                                  "below it" % (name, owner[name], s, target, owner[target]))
            if re.match(r"P?MPI_|ompi_", s) and owner[name] != "runtime":
                errors.append("%s (layer %s) references %s: only the runtime calls MPI" % (name, owner[name], s))
    for comp in tarjan(graph):
        if len(comp) > 1:
            errors.append("circle of files calling each other: %s" % " -> ".join(sorted(comp)))

    # public headers: the layer of the functions they declare
    header_layer = {}
    inc = os.path.join(src, "include", "meshinfer")
    decl = re.compile(r"^(?!static|typedef|#|\s)[A-Za-z_][\w \t\*]*?\b(mi_\w+)\s*\(", re.M)
    for h in sorted(os.listdir(inc)):
        text = open(os.path.join(inc, h)).read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        layers = set()
        for fn in decl.findall(text):
            if fn not in defs:
                errors.append("include/meshinfer/%s declares %s, which no library defines" % (h, fn))
            else:
                layers.add(owner[defs[fn]])
        if len(layers) > 1:
            errors.append("include/meshinfer/%s declares functions of several layers (%s): one header per layer"
                          % (h, ", ".join(sorted(layers, key=rank.get))))
        if layers:
            header_layer["meshinfer/" + h] = max(layers, key=rank.get)

    # includes: never a header of a higher layer
    for layer in order:
        folder = os.path.join(src, "src", layer)
        for f in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if not f.endswith((".c", ".h")):
                continue
            for m in re.finditer(r'#include "([^"]+)"', open(os.path.join(folder, f)).read()):
                h = m.group(1)
                if h.startswith("meshinfer/"):
                    hl = header_layer.get(h)
                elif h.startswith("../"):
                    hl = h.split("/")[1]
                else:
                    hl = layer
                if hl in rank and rank[hl] > rank[layer]:
                    errors.append("src/%s/%s (layer %s) includes %s of layer %s" % (layer, f, layer, h, hl))

    for e in errors:
        print("layering: " + e)
    if errors:
        print("layering: %d violations of %s" % (len(errors), " -> ".join(order)))
        return 1
    n_edges = sum(len(v) for v in graph.values())
    print("layering: %d files in %d layers (%s), %d calls between files, all downward, no circle; "
          "MPI only in runtime" % (len(owner), len(order), " -> ".join(order), n_edges))
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
