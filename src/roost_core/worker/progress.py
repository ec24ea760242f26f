"""A run's progress: the worker's last sign that its run works, told to the daemon.

A run can work for a long time with nothing on its job row moving (``state: running``,
no items waiting, ``updated`` from its start) while its transcript grows. The worker
notes each sign of work (an item delivered into the transcript, a tool boundary, a model
call) and tells the daemon the last one, ``{"at", "what", "steps"}`` (``job_status``'s
``progress``), at most once per :data:`PROGRESS_SECONDS`: one op per second at most
however many items a run takes, and none while nothing happens. The daemon keeps it in
memory only (no record write, ``updated`` unmoved) and shows it on the job's row.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

#: The shortest time between two progress notes to the daemon.
PROGRESS_SECONDS = 1.0

ITEM = "item delivered"
BOUNDARY = "tool boundary"
MODEL = "model call"


class RunProgress:
    """Notes signs of work (:meth:`note`, cheap: called per item) and sends the last one
    (:meth:`run`, a task of the worker) through ``send``."""

    def __init__(self, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self.send = send
        self.steps = 0
        self.last: dict[str, Any] | None = None
        self.wanted = anyio.Event()

    def new_run(self) -> None:
        """A run starts: its steps count from zero."""
        self.steps = 0

    def note(self, what: str) -> None:
        """One sign that the run works (``what``: :data:`ITEM`, :data:`BOUNDARY`, :data:`MODEL`)."""
        self.steps += 1
        self.last = {"at": time.time(), "what": what, "steps": self.steps}
        self.wanted.set()

    async def run(self) -> None:
        """Send the last note whenever there is a new one, then wait out the interval, so
        the notes made meanwhile go as one."""
        while True:
            await self.wanted.wait()
            self.wanted = anyio.Event()
            if self.last is not None:
                await self.send(self.last)
            await anyio.sleep(PROGRESS_SECONDS)
