"""The include arrows of the tree, and the check that they only go downward:
between the top-level folders (docs/architecture.md's layers; README's map),
between the rooms inside agent/, host/ and model/modeld/, and between the
modules of the Python package python/gpubox.

An arrow A -> B is a `#include "B/..."` in a C++ file under A, or a
`${CMAKE_SOURCE_DIR}/B/...` in a CMakeLists.txt under A (a source compiled or
embedded from B). Folders, lowest first; a folder may reach only lower ones,
never a higher one, nor its peer (agent/ and host/ are two programs):

  python   the gpubox package: Python, embedded by kernel/ and agent/ as data
  base     Status, Fd, hashing, base64, extractor, stager, version
  rpc      the wire protocol, server and client
  hooks    intervention specs, shared by modeld and the clients
  model    gpubox-modeld, tokenizer, weights, chat templates
  kernel   the Jupyter kernel
  agent    PID 1                              (peers: neither reaches
  host     the CLI, MCP server and backends    the other)

Rooms: inside a folder of ROOMS, a C++ file's room is the subfolder it sits in
(at any depth below it), "." for the folder's own files (its ground floor),
"top" for the files of TOP_FILES (the main and the wiring, above every room).
A room may include its own files and those of lower rooms only. KNOWN_UPWARD
names the upward includes of today, each with why; they are printed, not
failed, and one that is gone must leave the list (so it only shrinks).

Python: each module of python/gpubox sits in one layer of PYTHON_LAYERS and may
import (at the top or inside a function) its own layer and lower ones only; a
module in no layer fails too.

Usage: include_layers.py ROOT [--list]. Prints every arrow with its count, by
folder, by room and by Python layer; exits 1, naming each include or import
that goes up or sideways."""

import ast
import collections
import os
import re
import sys

LAYERS = ["python", "base", "rpc", "hooks", "model", "kernel", "agent", "host"]
RANK = {name: rank for rank, name in enumerate(LAYERS)}
RANK["host"] = RANK["agent"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)
INCLUDE_PATH = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CMAKE_SOURCE = re.compile(r"\$\{CMAKE_SOURCE_DIR\}/([a-z_]+)/")
SOURCE_SUFFIXES = (".h", ".cpp", ".cc", ".in", ".inc")

# The rooms of each folder, lowest first.
ROOMS = {
    # config: modeld.json and modeld's private files; gpu: the CUDA runtime, GPU info and graphs;
    # split: the ranks of a model across devices (collectives, threads, what they share);
    # decoder: the forward pass, its ops and tensors (a split model's ranks' passes too);
    # scheduler: generation, batches, the KV cache; interventions: hook-point ops, SAEs, fns;
    # registry: the loaded models; methods: model.* and gpu.*.
    "model/modeld": ["config", "gpu", "split", "decoder", "scheduler", "interventions", "registry", "methods", "top"],
    # .: the process table, log, config, event loop, supervisor, signals; usage: what the sandbox uses;
    # lifecycle: the watchdogs; jobs; serve: the served interfaces; methods: the RPC methods.
    "agent": [".", "usage", "lifecycle", "jobs", "serve", "methods", "top"],
    # .: the store and its records, keys, arguments, the agent's files; harvest: results; attach: the
    # Jupyter relay; backends; budget; sandboxes: what needs backends and budgets both; mcp; cli.
    "host": [".", "harvest", "attach", "backends", "budget", "sandboxes", "mcp", "cli", "top"],
}
TOP_FILES = {
    "model/modeld": {"main.cpp"},
    "agent": {"main.cpp", "agent.h", "agent.cpp", "pid1_loop.cpp"},  # the wiring and the PID-1 loop
    "host": {"main.cpp"},
}
# (file, the room it reaches up to): why. Debts to pay, not a place to add more.
KNOWN_UPWARD = {
    # None today: host/'s floors (host/sandboxes/) ended the last ones.
}

# The modules of python/gpubox by layer, lowest first.
PYTHON_PACKAGE = "python/gpubox"
PYTHON_LAYERS = [
    ("wire", ["_msgpack", "_zmtp", "protocol", "_transport", "errors", "tensor_wire"]),
    ("config", ["backends", "cli_path", "config", "plan"]),
    ("client", ["user_fn", "interventions", "models", "client"]),
    ("sandboxes", ["sandboxes", "control_plane", "modal_backend", "kubernetes_backend", "served", "sandbox", "workspace", "notebook", "scoped"]),
    ("toolkit", ["hook_engine", "hook_client", "hooks"]),  # gpubox.hooks, in a kernel
    ("integrations", ["inspect"]),  # gpubox.inspect: Inspect's sandbox provider
    ("package", ["__init__"]),
]


def source_files(root, top):
    for folder, _, files in os.walk(os.path.join(root, top)):
        for name in sorted(files):
            yield folder, name


def arrows(root):
    """{(from, to): [where, ...]} for every include between two layer folders."""
    found = collections.defaultdict(list)
    for top in LAYERS:
        for folder, name in source_files(root, top):
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


def room_of(folder, relative):
    """The room of a path relative to folder (a file, or a header's path as included)."""
    parts = relative.split("/")
    if len(parts) > 1:
        return parts[0]
    return "top" if parts[0] in TOP_FILES.get(folder, ()) else "."


def room_arrows(root, folder):
    """{(from room, to room): [file, ...]} for every include between two rooms of folder."""
    found = collections.defaultdict(list)
    prefix = folder + "/"
    for directory, name in source_files(root, folder):
        if not name.endswith(SOURCE_SUFFIXES):
            continue
        path = os.path.join(directory, name)
        source = room_of(folder, os.path.relpath(path, os.path.join(root, folder)).replace(os.sep, "/"))
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for included in INCLUDE_PATH.findall(text):
            if included.startswith(prefix):
                target = room_of(folder, included[len(prefix):])
                if target != source:
                    found[(source, target)].append(os.path.relpath(path, root).replace(os.sep, "/"))
    return found


def python_imports(root):
    """{module: {module it imports: line}} for the modules of python/gpubox (imports anywhere in a module);
    a subpackage (gpubox/inspect/) is one module, its files' imports together."""
    package = os.path.join(root, PYTHON_PACKAGE)
    found = {}
    if not os.path.isdir(package):
        return found
    for name in sorted(os.listdir(package)):
        if name.endswith(".py"):
            module, files, depth = name[:-3], [os.path.join(package, name)], 1
        elif os.path.isfile(os.path.join(package, name, "__init__.py")):
            files = sorted(os.path.join(package, name, f) for f in os.listdir(os.path.join(package, name))
                           if f.endswith(".py"))
            module, depth = name, 2
        else:
            continue
        targets = {}
        for path in files:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for target, line in _gpubox_imports(tree, depth):
                targets.setdefault(target, line)
        targets.pop(module, None)
        found[module] = targets
    return found


def _gpubox_imports(tree, depth):
    """(module of the package, line) for each import in tree, a file `depth` folders below gpubox/'s parent."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == depth:
            names = [node.module] if node.module else [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and 0 < node.level < depth:
            continue  # within the subpackage
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpubox":
            names = [node.module[len("gpubox."):] if "." in node.module else "__init__"]
        elif isinstance(node, ast.Import):
            names = [alias.name[len("gpubox."):] for alias in node.names if alias.name.startswith("gpubox.")]
        else:
            continue
        for target in names:
            yield target.split(".")[0], node.lineno


def check_folders(root, out, problems):
    for (source, target), where in sorted(arrows(root).items()):
        up = RANK[target] >= RANK[source]
        print("%-7s -> %-7s %4d%s" % (source, target, len(where), "  UPWARD" if up else ""), file=out)
        if up:
            problems += ["%s includes %s/" % (path, target) for path in sorted(set(where))]


def check_rooms(root, out, problems):
    known_seen = set()
    for folder, order in ROOMS.items():
        if not os.path.isdir(os.path.join(root, folder)):
            continue
        rank = {room: i for i, room in enumerate(order)}
        print("\nrooms of %s/, lowest first: %s" % (folder, " ".join(order)), file=out)
        for (source, target), where in sorted(room_arrows(root, folder).items(),
                                              key=lambda item: (rank.get(item[0][0], -1), rank.get(item[0][1], -1))):
            for room in (source, target):
                if room not in rank:
                    problems.append("%s/%s/ is in no room of include_layers.py's ROOMS" % (folder, room))
                    rank[room] = -1
            known = sorted(set(path for path in where if (path, target) in KNOWN_UPWARD))
            known_seen.update((path, target) for path in known)
            unknown = sorted(set(where) - set(known))
            up = rank[target] > rank[source]
            note = ""
            if up and unknown:
                note = "  UPWARD"
                problems += ["%s includes %s/%s/ (a higher room)" % (path, folder, target) for path in unknown]
            elif up:
                note = "  known upward: " + ", ".join(known)
            print("  %-13s -> %-13s %4d%s" % (source, target, len(where), note), file=out)
    for path, room in sorted(set(KNOWN_UPWARD) - known_seen):
        if os.path.exists(os.path.join(root, path)):
            problems.append("%s no longer includes %s/: take it out of KNOWN_UPWARD" % (path, room))


def check_python(root, out, problems):
    imports = python_imports(root)
    if not imports:
        return
    layer_of = {module: i for i, (_, modules) in enumerate(PYTHON_LAYERS) for module in modules}
    names = [name for name, _ in PYTHON_LAYERS]
    print("\nlayers of %s/, lowest first: %s" % (PYTHON_PACKAGE, " ".join(names)), file=out)
    counts = collections.Counter()
    for module, targets in sorted(imports.items()):
        if module not in layer_of:
            problems.append("%s/%s.py is in no layer of include_layers.py's PYTHON_LAYERS" % (PYTHON_PACKAGE, module))
            continue
        for target, line in sorted(targets.items()):
            if target not in layer_of:
                continue  # not a module of the package (a subpackage or a name of __init__)
            source_layer, target_layer = layer_of[module], layer_of[target]
            if source_layer != target_layer:
                counts[(source_layer, target_layer)] += 1
            if target_layer > source_layer:
                problems.append("%s/%s.py:%d imports %s (layer %s, above %s)" % (
                    PYTHON_PACKAGE, module, line, target, names[target_layer], names[source_layer]))
    for (source, target), count in sorted(counts.items()):
        print("  %-13s -> %-13s %4d%s" % (names[source], names[target], count, "  UPWARD" if target > source else ""),
              file=out)
    for i, (name, modules) in enumerate(PYTHON_LAYERS):
        print("  %-13s %s" % (name + ":", " ".join(modules)), file=out)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    root = argv[1]
    problems = []
    check_folders(root, sys.stdout, problems)
    check_rooms(root, sys.stdout, problems)
    check_python(root, sys.stdout, problems)
    if problems:
        print("include arrows must go downward (tests/layers/include_layers.py):", file=sys.stderr)
        for line in problems:
            print("  " + line, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
