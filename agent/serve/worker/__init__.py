"""The serve worker: the kernel's Python running a user's interface.py and its @expose functions for the agent (agent/serve/service.cpp).

Shipped inside the agent binary with python/gpubox's tensor_wire.py and
_msgpack.py (cmake/EmbedPython.cmake) and run from there as the package
gpubox_serve_worker, so it needs only the standard library (numpy and torch
are used when interface code passes arrays or tensors). Modules: __main__
(the entry), channel (fd 3 and its memfds), calls (the threads that run
calls), exposed (expose, get_model_path, loading interface.py), schema (the
FUNCTION descriptions).
"""
