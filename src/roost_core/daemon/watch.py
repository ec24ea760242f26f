"""The ``watch`` stream: connections that asked for it get the whole agent table pushed
whenever something changes, coalesced over a short window, so views never poll."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from roost_core.daemon.connection import Connection

#: Changes closer together than this go out as one event.
COALESCE_SECONDS = 0.05


class Watchers:
    def __init__(self, snapshot: Callable[[], list[dict[str, Any]]]) -> None:
        self.snapshot = snapshot
        self.connections: set[Connection] = set()
        self._wake = anyio.Event()

    def add(self, conn: Connection) -> None:
        conn.watching = True
        self.connections.add(conn)

    def discard(self, conn: Connection) -> None:
        self.connections.discard(conn)

    def touch(self) -> None:
        """Something a view shows changed."""
        if self.connections:
            self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            await anyio.sleep(COALESCE_SECONDS)
            self._wake = anyio.Event()
            live = [conn for conn in self.connections if not conn.closed]
            self.connections = set(live)
            if live:
                event = {"event": "agents", "agents": self.snapshot()}
                for conn in live:
                    conn.send(event)
