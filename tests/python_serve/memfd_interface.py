# Served by test_memfds.py: functions that keep what they were passed and
# stream large results, to check that reused memfds never carry one call's
# bytes into another (expose is injected by the worker).
import gc
import os

import numpy

KEPT = []


@expose
def keep(t):
    """Keeps t (built on the call's memfd mapping) beyond the call; returns its sum."""
    KEPT.append(t)
    return float(numpy.asarray(t).sum())


@expose
def kept_sums():
    return [float(numpy.asarray(t).sum()) for t in KEPT]


@expose
def drop() -> int:
    KEPT.clear()
    gc.collect()
    return len(KEPT)


@expose
def ends(t):
    t = numpy.asarray(t)
    return [float(t[0]), float(t[-1]), float(t.min()), float(t.max())]


@expose
def same(t):
    return t


@expose
def filled(n: int, count: int):
    """Streams count float32 arrays of n, the i-th all i."""
    for i in range(count):
        yield numpy.full(n, float(i), dtype=numpy.float32)


@expose
def memfds() -> dict:
    """The worker's memfd mappings by name: {name: distinct inodes}."""
    found = {}
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/memfd:"):
                found.setdefault(fields[5], set()).add(fields[4])
    return {name: len(inodes) for name, inodes in found.items()}


@expose
def pid() -> int:
    return os.getpid()
