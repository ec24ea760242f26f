"""The ``watch`` stream: connections that asked for it get the whole agent table pushed
whenever something changes, and (with ``receipts``) the receipts made or moved since the
last push, coalesced over a short window, so views never poll."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from roost_core.daemon.connection import Connection
from roost_core.daemon.receipts import Receipt
from roost_core.protocol import encode

#: Changes closer together than this go out as one event.
COALESCE_SECONDS = 0.05
#: A ``receipts`` event holds at most this many (a burst of sends goes out in several),
#: so that even rows of the longest names stay well inside a frame.
RECEIPTS_PER_EVENT = 200
#: ``watch``'s answer holds the newest receipts that fit in this many bytes (a frame is
#: 1 MiB; the agent table needs room beside them).
RECEIPTS_ANSWER_BYTES = 640 * 1024


def newest_receipts(receipts: list[Receipt]) -> tuple[list[dict[str, Any]], int]:
    """The rows of the newest of ``receipts`` (oldest first) that fit in
    :data:`RECEIPTS_ANSWER_BYTES`, oldest first, and how many older ones were left out."""
    rows: list[dict[str, Any]] = []
    size = 0
    for receipt in reversed(receipts):
        row = receipt_row(receipt)
        size += len(encode(row))
        if size > RECEIPTS_ANSWER_BYTES:
            break
        rows.append(row)
    rows.reverse()
    return rows, len(receipts) - len(rows)


def receipt_row(receipt: Receipt) -> dict[str, Any]:
    """A receipt as a watch sends it: the [receipt](docs/protocol.md#receipt) row with
    the daemon's ``number`` for it, so a view replaces the row it holds."""
    row = receipt.to_json()
    row["number"] = receipt.number
    return row


class Watchers:
    def __init__(self, snapshot: Callable[[], list[dict[str, Any]]]) -> None:
        self.snapshot = snapshot
        self.connections: set[Connection] = set()
        #: The connections that watch receipts too (a subset of ``connections``).
        self.receipt_connections: set[Connection] = set()
        #: Receipts made or moved since the last push, by number (the newest state wins).
        self._moved: dict[int, Receipt] = {}
        self._agents_changed = False
        self._wake = anyio.Event()

    def add(self, conn: Connection, *, receipts: bool = False) -> None:
        conn.watching = True
        self.connections.add(conn)
        if receipts:
            self.receipt_connections.add(conn)

    def discard(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.receipt_connections.discard(conn)

    def touch(self) -> None:
        """Something a view shows changed."""
        if self.connections:
            self._agents_changed = True
            self._wake.set()

    def receipt_changed(self, receipt: Receipt) -> None:
        """A receipt was made or moved (``Receipts.changed``): pushed with the next event
        to the connections that watch receipts (costs nothing while none does)."""
        if self.receipt_connections:
            self._moved[receipt.number] = receipt
            self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            await anyio.sleep(COALESCE_SECONDS)
            self._wake = anyio.Event()
            live = [conn for conn in self.connections if not conn.closed]
            self.connections = set(live)
            self.receipt_connections &= self.connections
            moved, self._moved = self._moved, {}
            if moved and self.receipt_connections:
                rows = [receipt_row(r) for r in moved.values()]
                for start in range(0, len(rows), RECEIPTS_PER_EVENT):
                    event = {"event": "receipts", "receipts": rows[start : start + RECEIPTS_PER_EVENT]}
                    for conn in self.receipt_connections:
                        conn.send(event)
            if self._agents_changed and live:
                self._agents_changed = False
                event = {"event": "agents", "agents": self.snapshot()}
                for conn in live:
                    conn.send(event)
