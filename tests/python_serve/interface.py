# The interface the serve tests serve (expose and get_model_path are injected by the worker).
import os
import time
from typing import Literal, Optional

print("interface imported")


@expose
def add(a: int, b: int = 2) -> int:
    """Adds two numbers."""
    return a + b


@expose
def echo(value):
    return value


@expose
def count(n: int, *, start: int = 0):
    """Yields n numbers from start."""
    for i in range(start, start + n):
        yield i


@expose
def fail(message: str):
    raise ValueError(message)  # FAIL_LINE


@expose
def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@expose
def pid() -> int:
    return os.getpid()


@expose
def crash():
    os.kill(os.getpid(), 9)


@expose
def model_path(name: str) -> str:
    return get_model_path(name)


@expose(name="fancy")
def _fancy(a: int, /, b: Optional[str] = None, *rest: float, flag: bool = False, mode: Literal["x", "y"] = "x",
           weights: dict[str, float] = None, ids: list[int] = (), **extra) -> list:
    """Every kind of parameter.

    Returns them as a list."""
    return [a, b, list(rest), flag, mode, weights, list(ids), extra]


SPIN = {"state": "idle"}


@expose
def spin(seconds: float) -> str:
    """Busy pure-Python loop: a cancellation stops it at once."""
    SPIN["state"] = "running"
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
        return "done"
    finally:
        SPIN["state"] = "stopped"


@expose
def spin_state() -> str:
    return SPIN["state"]
