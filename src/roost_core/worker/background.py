"""What a settled job keeps running on purpose, told to the daemon while it runs.

A child asked to start a dev server (``nohup npm run dev &``, ``setsid ...``) has, once
its run settles, processes of its own that its host is not running: the tool's shell has
exited and left them (the worker's :class:`~roost_core.worker.supervisor.Supervisor` finds
them: :meth:`~roost_core.worker.supervisor.Supervisor.background`). The daemon must not
hibernate such a child while they run (hibernation ends everything the job started), and
``roost jobs`` / ``roost agents`` show them.

So the worker looks once as each run settles (before its handback, so the daemon knows
before it could hibernate the job), and, only while some are running, again whenever one
of them exits (an exit watch each) or every :data:`LOOK_SECONDS` (what they started
meanwhile): no work per message, none at all for a job with no background. They still end
as everything the job started ends: on stop, removal, reap and a crash of the worker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from roost_core.worker.supervisor import Supervisor

#: At most this many background processes are named (pid and command line) in a report;
#: the count covers them all.
SHOWN = 5
#: A named process's command line is cut to this many characters.
COMMAND_CHARS = 120
#: While background processes run, the worker looks again this often even when none of
#: them exits (a server that started workers of its own, which outlive it).
LOOK_SECONDS = 5.0


def fields(found: list[tuple[int, str]]) -> dict[str, Any]:
    """The ``job_status`` fields that report ``found`` (pid, command line pairs):
    ``background`` (how many) and ``backgroundShown`` (the first :data:`SHOWN`)."""
    shown = [{"pid": pid, "command": command[:COMMAND_CHARS]} for pid, command in found[:SHOWN]]
    return {"background": len(found), "backgroundShown": shown}


class BackgroundWatch:
    """The background of one worker's job: looked at as each run settles, then watched
    (a task of the worker, :meth:`run`) until none is left; each change is told through
    ``tell`` (the worker's ``job_status``)."""

    def __init__(self, supervisor: Supervisor, tell: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self.supervisor = supervisor
        self.tell = tell
        #: What the daemon was last told: (pid, command line) pairs.
        self.found: list[tuple[int, str]] = []
        self._wanted = anyio.Event()

    def at_settle(self) -> dict[str, Any]:
        """Look now (a run is settling); the fields to send before its handback. The
        watch starts when there is anything to watch."""
        self.found = self.supervisor.background()
        if self.found:
            self._wanted.set()
        return fields(self.found)

    async def run(self) -> None:
        """Watch while there is a background: look again when one exits (or every
        :data:`LOOK_SECONDS`), tell the daemon what changed, rest when none is left."""
        while True:
            await self._wanted.wait()
            self._wanted = anyio.Event()
            while self.found:
                await self.supervisor.until_one_exits([pid for pid, _ in self.found], LOOK_SECONDS)
                found = self.supervisor.background()
                if found != self.found:
                    self.found = found
                    await self.tell(fields(found))
