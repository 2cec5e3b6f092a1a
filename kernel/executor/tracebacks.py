"""User tracebacks without the executor's own frames (every file under <gpubox-executor>): for error frames, in both backends."""

import traceback

EXECUTOR_FILE = "<gpubox-executor>"  # the origin python_executor.cpp gives the package: <gpubox-executor>/MODULE.py


def is_executor_file(filename):
    return filename.startswith(EXECUTOR_FILE)


def without_executor_frames(tb):
    """The traceback chain tb without the executor's own frames (a signal
    handler's, input()'s): user tracebacks show user frames only."""
    frames = []
    while tb is not None:
        if not is_executor_file(tb.tb_frame.f_code.co_filename):
            frames.append(tb)
        tb = tb.tb_next
    for earlier, later in zip(frames, frames[1:]):
        earlier.tb_next = later
    if frames:
        frames[-1].tb_next = None
    return frames[0] if frames else None


def strip_executor_frames(error, seen=None):
    """Removes the executor's frames from error's traceback and from those of the
    exceptions it chains (__cause__, __context__)."""
    seen = set() if seen is None else seen
    if error is None or id(error) in seen:
        return
    seen.add(id(error))
    error.__traceback__ = without_executor_frames(error.__traceback__)
    strip_executor_frames(error.__cause__, seen)
    strip_executor_frames(error.__context__, seen)


def clean_traceback(etype, evalue, tb):
    """The traceback lines of an exception, without the executor's own frames."""
    frames = [f for f in traceback.extract_tb(tb) if not is_executor_file(f.filename)]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(etype, evalue)
    return [line.rstrip("\n") for line in lines]
