"""Exit notices for workers the daemon did not start itself, with no polling.

A worker the daemon started is its fork server's child (or its own): its exit is reported
(``process.poll()``). A worker it *adopted* (started by the daemon before a restart, or
whose fork server died) is nobody's child here, so the only way to see it go used to be a
liveness check by pid and create time (``locks.is_alive``, about 60 µs of the loop's time)
for each such worker at every round of the monitor, ten times a second.

Where the platform can watch a process's exit on an fd (:func:`roost_core.platform.watch_exit`:
a pidfd on Linux 5.3 on, a kqueue on macOS and the BSDs), each adopted worker is checked
once (the fd opened, then its create time compared, so it is the worker's and not a
newcomer's with the same pid), and its exit then arrives as a loop callback: at once, and
at no cost while it runs. Where it cannot (an older kernel, a system with neither) or one
cannot be opened now (no fds left), :meth:`ExitWatches.watch` says so and the monitor
checks liveness as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from roost_core import locks, platform

log = logging.getLogger("roost.daemon")


class ExitWatches:
    """One exit watch (:func:`roost_core.platform.watch_exit`) per watched process, on the
    running loop; ``on_exit(key, pid)`` is called once when a watched process exits (its
    watch is gone by then)."""

    def __init__(self, on_exit: Callable[[str, int], None]) -> None:
        self.on_exit = on_exit
        #: key -> (pid, its exit watch, the loop it is read on)
        self._watched: dict[str, tuple[int, Any, asyncio.AbstractEventLoop]] = {}
        #: False once the system has refused a watch for want of support: poll from then on.
        self.supported = platform.CAN_WATCH_EXITS

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
            handle = platform.watch_exit(pid)
        except ProcessLookupError:
            return False
        except platform.NoExitWatch as exc:
            log.info("%s: the exits of adopted workers are polled", exc.strerror)
            self.supported = False
            return None
        except OSError:
            return None  # (no fds left, say: polled this round, watched at a later one)
        # The watch names whichever process had ``pid`` when it was opened: only a create
        # time that matches now makes it the worker's.
        if not locks.is_alive(pid, create_time):
            handle.close()
            return False
        loop = asyncio.get_running_loop()
        try:
            loop.add_reader(handle.fileno(), self._exited, key)
        except (OSError, ValueError, RuntimeError):  # a loop that cannot watch this fd
            handle.close()
            return None
        self._watched[key] = (pid, handle, loop)
        return True

    def forget(self, key: str) -> None:
        """Stop watching for ``key`` (its worker is handled as gone, or its job removed)."""
        watched = self._watched.pop(key, None)
        if watched is not None:
            _pid, handle, loop = watched
            if not loop.is_closed():
                loop.remove_reader(handle.fileno())
            handle.close()

    def close(self) -> None:
        """Stop every watch (the daemon stops; its successor watches again)."""
        for key in list(self._watched):
            self.forget(key)

    def _exited(self, key: str) -> None:
        pid = self._watched[key][0]
        self.forget(key)
        self.on_exit(key, pid)
