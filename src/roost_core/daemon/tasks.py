"""The daemon's background tasks and its clock: what every service is handed instead of
reaching into the daemon for them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import anyio.abc

log = logging.getLogger("roost.daemon")


class Tasks:
    """Runs a coroutine function as a task of the daemon's task group (set once the
    daemon serves; before that, nothing runs)."""

    def __init__(self) -> None:
        self.tg: anyio.abc.TaskGroup | None = None

    def soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``fn(*args)`` as a task of the daemon (from sync code paths). Its failure is
        logged: a task of the daemon's task group that raised would end the daemon."""
        if self.tg is not None:
            self.tg.start_soon(_logged, fn, *args)


async def _logged(fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
    try:
        await fn(*args)
    except Exception:  # a background task's error boundary
        log.exception("daemon task %s failed", getattr(fn, "__qualname__", fn))


def call_soon(fn: Callable[[], None]) -> None:
    """Run ``fn`` at the running loop's next pass."""
    asyncio.get_running_loop().call_soon(fn)


class Clock:
    """The daemon's clock for rate windows, reaping and stop deadlines (monotonic).
    ``test_clock`` stops it (``frozen``) and moves it by hand, so a test of a window never
    depends on how long its own steps take."""

    def __init__(self) -> None:
        self.frozen: float | None = None

    def __call__(self) -> float:
        return time.monotonic() if self.frozen is None else self.frozen

    def advance(self, seconds: float) -> float:
        """Stop the clock (at the first call) and move it forward by ``seconds``."""
        if self.frozen is None:
            self.frozen = time.monotonic()
        self.frozen += seconds
        return self.frozen
