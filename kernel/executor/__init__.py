"""The kernel's Python executor: runs user code for the agent's Jupyter kernel (kernel/python_executor.cpp supervises it).

Shipped inside the agent binary (cmake/EmbedPython.cmake) and sent, as the
first frame of the private channel on fd 3, to the image's python3, whose
bootstrap runs it as the package gpubox_executor (files named
<gpubox-executor>/MODULE.py, which user tracebacks leave out); it needs only
the standard library. Frames, both ways: a 4-byte big-endian length, then one
JSON object. fds 1 and 2 are pipes the agent reads, so output from print,
os.write, C extensions and subprocesses is captured alike; fd 0 is /dev/null
(input() goes through the channel). With IPython importable the executor uses
its InteractiveShell (magics, !cmd, display formatters, _ and Out); otherwise a
plain mode with the same frames.

Modules: __main__ (the entry and the request loop), state (the running
request, SIGINT), channel (fd 3's frames), cells (one execute request: its
started and done frames, errors, payload), stdin (input(), getpass()),
display (MIME bundles, display() without IPython), figures (matplotlib),
tracebacks (user frames only), plain_backend and ipython_backend (the two
ways to run a cell), deferred_imports and ipython_speedups (IPython's start
and per-cell costs), import_watch (a callback once user code imports a
module), comms (Jupyter comms through the `comm` package).
"""
