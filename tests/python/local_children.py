"""For tests that create local sandboxes through the CLI: the agents it
detaches are reparented to this process, which reaps them as init would."""
import ctypes
import os

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Orphaned descendants (the detached agents) become this process's children."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_orphans():
    """Reaps every child that has exited, without waiting for the others."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
