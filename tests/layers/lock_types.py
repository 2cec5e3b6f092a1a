#!/usr/bin/env python3
"""Every lock in the C++ tree is one Clang's thread-safety analysis sees.

gpubox::Mutex, gpubox::SharedMutex and their scoped holders
(base/thread_annotations.h) carry the annotations; libstdc++'s std::mutex,
lock_guard, unique_lock and the rest do not, so a lock taken through them is
invisible to the check that every build runs (cmake/ThreadSafety.cmake). This
script names each use of one outside base/thread_annotations.h, unless its
line says why (a comment holding "thread-safety exception:").

Usage: lock_types.py ROOT. Prints FILE:LINE: TEXT for each use; exits 1 when
there is one.
"""

import os
import re
import sys

FOLDERS = ("agent", "base", "hooks", "host", "kernel", "model", "rpc", "tests")
SKIPPED = ("tests/assets", "tests/fuzz/corpus")
WRAPPER = "base/thread_annotations.h"
EXCEPTION = "thread-safety exception:"
RAW_LOCK = re.compile(
    r"\bstd::(mutex|shared_mutex|recursive_mutex|timed_mutex|shared_timed_mutex|lock_guard|unique_lock|"
    r"scoped_lock|shared_lock)\b|\bpthread_mutex_t\b"
)


def raw_locks(root):
    """(path, line number, line) of each raw lock under root's C++ folders."""
    found = []
    for folder in FOLDERS:
        for directory, subdirectories, files in os.walk(os.path.join(root, folder)):
            relative_dir = os.path.relpath(directory, root)
            subdirectories[:] = [d for d in subdirectories
                                 if os.path.join(relative_dir, d) not in SKIPPED and d != "node_modules"]
            for name in sorted(files):
                if not name.endswith((".cpp", ".h", ".inc", ".cc")):
                    continue
                path = os.path.join(relative_dir, name)
                if path == WRAPPER:
                    continue
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as source:
                    for number, line in enumerate(source, 1):
                        code = line.split("//", 1)[0]
                        if RAW_LOCK.search(code) and EXCEPTION not in line:
                            found.append((path, number, line.strip()))
    return found


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    found = raw_locks(sys.argv[1])
    for path, number, line in found:
        print(f"{path}:{number}: {line}")
    if found:
        print(f"{len(found)} lock(s) the thread-safety analysis cannot see: use gpubox::Mutex "
              f"({WRAPPER}), or say why on the line ('{EXCEPTION} ...')", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
