"""Exit notices for workers the daemon did not start itself, with no polling.

A worker the daemon started is its fork server's child (or its own): its exit is reported
(``process.poll()``). A worker it *adopted* (started by the daemon before a restart, or
whose fork server died) is nobody's child here, so the only way to see it go used to be a
liveness check by pid and create time (``locks.is_alive``, about 60 µs of the loop's time,
reading ``/proc``) for each such worker at every round of the monitor, ten times a second.

On Linux (5.3 on) a *pidfd* names one process for good: it cannot come to mean another
process once the pid is reused, and it becomes readable when that process exits. So each
adopted worker is checked once (the pidfd opened, then its create time compared, so it is
the worker's and not a newcomer's with the same pid), and its exit then arrives as a loop
callback: at once, and at no cost while it runs. Where there are no pidfds (an older
kernel, another OS) or one cannot be opened now (no fds left), :meth:`ExitWatches.watch`
says so and the monitor checks liveness as before.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Callable

from roost_core import locks

log = logging.getLogger("roost.daemon")

#: What ``pidfd_open`` answers where the kernel has no pidfds (or forbids them).
_NO_PIDFDS = frozenset({errno.ENOSYS, errno.EPERM, errno.EACCES})


class ExitWatches:
    """One pidfd per watched process, on the running loop; ``on_exit(key, pid)`` is called
    once when a watched process exits (its watch is gone by then)."""

    def __init__(self, on_exit: Callable[[str, int], None]) -> None:
        self.on_exit = on_exit
        #: key -> (pid, pidfd, the loop it is read on)
        self._watched: dict[str, tuple[int, int, asyncio.AbstractEventLoop]] = {}
        #: False once the kernel has refused a pidfd for want of support: poll from then on.
        self.supported = hasattr(os, "pidfd_open")

    def __len__(self) -> int:
        return len(self._watched)

    def __contains__(self, key: str) -> bool:
        return key in self._watched

    def watch(self, key: str, pid: int, create_time: float | None) -> bool | None:
        """Watch process ``pid`` (started at ``create_time``) for ``key``. True: it runs
        and is watched (already, or from now on); False: it is gone, or ``pid`` names
        another process now; None: it cannot be watched here, check its liveness."""
        watched = self._watched.get(key)
        if watched is not None:
            if watched[0] == pid:
                return True
            self.forget(key)  # another worker of the same job: the old one's watch goes
        if not self.supported:
            return None
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError as exc:
            if exc.errno in _NO_PIDFDS:
                log.info("no pidfds here (%s): the exits of adopted workers are polled", exc.strerror)
                self.supported = False
            return None  # (no fds left, say: polled this round, watched at a later one)
        # The pidfd names whichever process had ``pid`` when it was opened: only a create
        # time that matches now makes it the worker's.
        if not locks.is_alive(pid, create_time):
            os.close(fd)
            return False
        loop = asyncio.get_running_loop()
        try:
            loop.add_reader(fd, self._exited, key)
        except (OSError, ValueError, RuntimeError):  # a loop that cannot watch this fd
            os.close(fd)
            return None
        self._watched[key] = (pid, fd, loop)
        return True

    def forget(self, key: str) -> None:
        """Stop watching for ``key`` (its worker is handled as gone, or its job removed)."""
        watched = self._watched.pop(key, None)
        if watched is not None:
            _pid, fd, loop = watched
            if not loop.is_closed():
                loop.remove_reader(fd)
            os.close(fd)

    def close(self) -> None:
        """Stop every watch (the daemon stops; its successor watches again)."""
        for key in list(self._watched):
            self.forget(key)

    def _exited(self, key: str) -> None:
        pid = self._watched[key][0]
        self.forget(key)
        self.on_exit(key, pid)
