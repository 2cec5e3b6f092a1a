"""The include arrows between the top-level folders, and the check that they
only go downward (docs/architecture.md's layers; README's map).

An arrow A -> B is a `#include "B/..."` in a C++ file under A, or a
`${CMAKE_SOURCE_DIR}/B/...` in a CMakeLists.txt under A (a source compiled or
embedded from B). Layers, lowest first; a folder may reach only lower layers,
never a higher one, nor its peer (agent/ and host/ are two programs):

  python   the gpubox package: Python, embedded by kernel/ and agent/ as data
  base     Status, Fd, hashing, base64, extractor, stager, version
  rpc      the wire protocol, server and client
  hooks    intervention specs, shared by modeld and the clients
  model    gpubox-modeld, tokenizer, weights, chat templates
  kernel   the Jupyter kernel
  agent    PID 1                              (peers: neither reaches
  host     the CLI, MCP server and backends    the other)

Usage: include_layers.py ROOT [--list]. Prints every arrow with its count;
exits 1, naming each include that goes up or sideways."""

import collections
import os
import re
import sys

LAYERS = ["python", "base", "rpc", "hooks", "model", "kernel", "agent", "host"]
RANK = {name: rank for rank, name in enumerate(LAYERS)}
RANK["host"] = RANK["agent"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)
CMAKE_SOURCE = re.compile(r"\$\{CMAKE_SOURCE_DIR\}/([a-z_]+)/")
SOURCE_SUFFIXES = (".h", ".cpp", ".cc", ".in")


def arrows(root):
    """{(from, to): [where, ...]} for every include between two layer folders."""
    found = collections.defaultdict(list)
    for top in LAYERS:
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if name.endswith(SOURCE_SUFFIXES):
                    pattern = INCLUDE
                elif name == "CMakeLists.txt":
                    pattern = CMAKE_SOURCE
                else:
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for target in pattern.findall(text):
                    if target in RANK and target != top:
                        found[(top, target)].append(os.path.relpath(path, root))
    return found


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    found = arrows(argv[1])
    upward = []
    for (source, target), where in sorted(found.items()):
        up = RANK[target] >= RANK[source]
        print("%-7s -> %-7s %4d%s" % (source, target, len(where), "  UPWARD" if up else ""))
        if up:
            upward += ["%s includes %s/" % (path, target) for path in sorted(set(where))]
    if upward:
        print("include arrows must go downward (tests/layers/include_layers.py):", file=sys.stderr)
        for line in upward:
            print("  " + line, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
