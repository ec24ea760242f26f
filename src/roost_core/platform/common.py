"""What both platform implementations share: the parts of the process table psutil reads
the same way on every system it knows, writes at an offset, and the exception a system
without exit watches raises.

Nothing here names a call of one kernel; :mod:`roost_core.platform.linux` and
:mod:`roost_core.platform.portable` build on it.
"""

from __future__ import annotations

import os


class NoExitWatch(OSError):
    """This system (or this kernel, or its policy) cannot watch a process's exit on an fd:
    the caller checks liveness instead, from now on."""


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started, in seconds since the epoch, as psutil reports it (the
    value writer locks and job records keep, so a reused pid is never taken for the
    process that had it); None when there is no such process."""
    import psutil  # here: the Linux implementation and a hook's relay run without it

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError, OverflowError):
        return None


def write_at(fd: int, data: bytes | memoryview, offset: int) -> None:
    """``os.pwrite`` of all of ``data`` at ``offset`` (a short write is not an error)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
