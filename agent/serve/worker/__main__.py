"""The serve worker's entry: takes the load message, imports interface.py, says ready (or load_failed) and serves calls until the agent closes fd 3."""

import os
import sys

from .calls import Worker, remote_traceback, type_name
from .channel import Channel
from .exposed import load


def main():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)
        except Exception:
            pass
    channel = Channel()
    first = channel.read()
    if first is None:
        os._exit(0)
    try:
        functions = load(first[0])
    except BaseException as error:
        channel.send({"op": "load_failed", "type": type_name(error), "message": str(error),
                      "traceback": remote_traceback(error)})
        os._exit(1)
    channel.send({"op": "ready", "functions": functions})
    Worker(channel).serve()


if __name__ == "__main__":
    main()
