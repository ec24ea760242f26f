"""One client connection's state: what it is bound to (a job's worker, a foreground peer,
or nothing), which decides the ops it may call and who it speaks as; its requests waiting
for their answers; and its output not yet written.

It does no I/O itself. :mod:`roost_core.daemon.wire` attaches an asyncio transport and a
:class:`Flusher`: every frame queued in one pass of the event loop then leaves in one
``transport.write`` (the transport keeps what the socket does not take yet, in order).
The one exception is :meth:`Connection.push`, an item a foreground receiver waits for:
it is written at once when nothing queued waits before it.
A detached connection (:meth:`Connection.detached`) has no transport: what it is sent
stays queued for :meth:`Connection.take_sent`, so the op logic's tests need no socket.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from roost_core.protocol import ProtocolError, decode_answer, encode

if TYPE_CHECKING:
    from roost_core.daemon.jobs import Job
    from roost_core.daemon.peers import ForegroundPeer
    from roost_core.store import Commit

log = logging.getLogger("roost.daemon")

#: A connection whose unread output passes this is too slow to keep; it is dropped.
MAX_OUTBOX_BYTES = 64 * 1024 * 1024


class Flusher:
    """Writes the output every connection queued in one pass of the loop, from one loop
    callback for all of them (not one per connection).

    ``before_write`` runs before any of it is written (and before a closing connection's
    last output): the daemon writes the job records its ops changed there, so what a
    client reads never runs ahead of what is on disk. ``commit`` runs first, once per
    pass: the daemon hands the journal the records the pass buffered there (without
    fsync that is their write, and their answers join the pass's output)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        before_write: Callable[[], None] | None = None,
        commit: Callable[[], None] | None = None,
    ) -> None:
        self._loop = loop
        self._dirty: list[Connection] = []
        self.before_write = before_write or _nothing
        self.commit = commit or _nothing

    def mark(self, conn: Connection) -> None:
        """``conn`` has output to write at the end of this pass."""
        if not self._dirty:
            self._loop.call_soon(self._flush)
        self._dirty.append(conn)

    def _flush(self) -> None:
        # The journal's records of this pass are handed over first: without fsync that
        # is their write, and the answers waiting for it join this pass's output (one
        # write per connection, not a second pass for the answers).
        self.commit()
        dirty, self._dirty = self._dirty, []
        self.before_write()
        for conn in dirty:
            conn.write_out()


def _nothing() -> None:
    """No records to write first (a flusher with no daemon)."""


class Connection:
    def __init__(self, number: int, *, credentials: tuple[int, int]) -> None:
        self.number = number
        #: (pid, uid) of the process at the other end, as the kernel saw it at connect.
        self.pid, self.uid = credentials
        self.job: Job | None = None
        self.peer: ForegroundPeer | None = None
        #: The last ``peer_register`` named the peer this connection already spoke for
        #: (a name change, a second ``session_start``): what it has in flight was pushed
        #: here already, and is not pushed twice.
        self.registered_again = False
        #: A warm worker's slot (``warm_hello``), until a job adopts it.
        self.warm: Any = None
        #: The job this connection holds attached (``roost attach``: ``daemon.attach``).
        self.attaching: Job | None = None
        self.watching = False
        self.closed = False
        #: Set once the connection is gone and its output written (or given up).
        self.flushed = anyio.Event()
        self.transport: asyncio.WriteTransport | None = None
        self._flusher: Flusher | None = None
        self._outbox: list[bytes] = []
        self._outbox_bytes = 0
        self._marked = False  # the flusher writes this connection's outbox this pass
        #: Requests accepted and waiting for their journal commit to be answered.
        self.pending = 0
        self._drained: anyio.Event | None = None
        self._close_when_answered = False
        #: The commit the newest pending answer waits for (answers leave in request order).
        self.last_commit: Commit | None = None
        #: The answers that wait for ``last_commit``, made and sent by one callback of
        #: it, in order (``dispatch``); None once that callback is added to no more.
        self.batch: list[Any] | None = None
        self.read_ended = False
        #: Requests that wait for an op that awaits, in order; while any waits, later
        #: requests join them so that none overtakes another (``wire`` runs them).
        self.lane: list[Any] = []

    @classmethod
    def detached(cls, number: int, *, pid: int, uid: int) -> Connection:
        """A connection with no socket, as if process ``pid`` of user ``uid`` had
        connected: the daemon's op logic runs on it with no I/O, and what it sends stays
        queued for :meth:`take_sent` (the op logic's tests need no socket)."""
        return cls(number, credentials=(pid, uid))

    def attach(self, transport: asyncio.WriteTransport, flusher: Flusher) -> None:
        """Write to ``transport`` from now on, through ``flusher``."""
        self.transport = transport
        self._flusher = flusher
        if self._outbox:
            self._mark()

    def take_sent(self) -> list[dict[str, Any] | ProtocolError]:
        """The frames queued for this client and not written, decoded; the queue emptied.
        (A detached connection keeps all it was sent.)"""
        frames = [decode_answer(line) for data in self._outbox for line in data.splitlines() if line]
        self._outbox.clear()
        self._outbox_bytes = 0
        return frames

    @property
    def unsent(self) -> int:
        """Bytes queued for this client that its socket has not taken yet."""
        buffered = self.transport.get_write_buffer_size() if self.transport is not None else 0
        return self._outbox_bytes + buffered

    @property
    def same_user(self) -> bool:
        return self.uid == os.getuid()

    @property
    def bound(self) -> bool:
        return self.job is not None or self.peer is not None

    async def drained(self) -> None:
        """Until every pending request of this connection has been answered."""
        while self.pending:
            self._drained = anyio.Event()
            await self._drained.wait()

    def answered_pending(self, count: int = 1) -> None:
        self.pending -= count
        if self.pending == 0:
            if self._drained is not None:
                self._drained.set()
            if self._close_when_answered:
                self.close()

    def close_when_answered(self) -> None:
        """Close once every request waiting for its commit is answered: a client that
        ended its writes (a shell pipe, ``socat``) still reads every answer."""
        if self.pending == 0:
            self.close()
        else:
            self._close_when_answered = True

    def answer(self, frame: dict[str, Any]) -> None:
        """Send an answer that needs no wait of its own, after every answer still waiting
        for a commit (a commit's callbacks run in the order they were added, and commits
        finish in order, so hanging it on the newest one keeps request order)."""
        if self.pending == 0 or self.last_commit is None:
            self.send(frame)
            return
        self.pending += 1
        self.batch = None  # an answer after this one waits behind it, not in that batch

        def send_now(_commit: Any) -> None:
            try:
                self.send(frame)
            finally:
                self.answered_pending()

        self.last_commit.when_done(send_now)

    def send(self, frame: dict[str, Any] | bytes) -> None:
        """Queue a frame (or its line, encoded already by ``protocol.encode``); everything
        queued in one pass of the loop leaves in one write."""
        if self.closed:
            return
        data = frame if isinstance(frame, bytes) else encode(frame)
        self._outbox.append(data)
        self._outbox_bytes += len(data)
        if self._outbox_bytes > MAX_OUTBOX_BYTES:
            self._too_slow()
        elif not self._marked and self._flusher is not None:
            self._mark()

    def push(self, data: bytes) -> None:
        """:meth:`send` an event its receiver waits for (a foreground peer's item): written
        at once when nothing this pass queued waits before it on this connection, so the
        receiver does not wait for the rest of the pass (the sender's answer among it)."""
        if self._outbox or self.transport is None or self.closed:
            self.send(data)
            return
        assert self._flusher is not None
        self._flusher.before_write()
        self._write(data)

    def _mark(self) -> None:
        assert self._flusher is not None
        self._marked = True
        self._flusher.mark(self)

    def flush(self) -> None:
        """Hand the outbox to the transport now, after the flusher's ``before_write``
        (``close``, and a refused client's one answer)."""
        if self._flusher is not None:
            self._flusher.before_write()
        self.write_out()

    def write_out(self) -> None:
        """Hand the outbox to the transport (the flusher's callback, which ran its
        ``before_write`` already)."""
        self._marked = False
        if not self._outbox or self.transport is None:
            return
        data = self._outbox[0] if len(self._outbox) == 1 else b"".join(self._outbox)
        self._outbox.clear()
        self._outbox_bytes = 0
        self._write(data)

    def _write(self, data: bytes) -> None:
        """Hand ``data`` to the transport; a client whose unread output passes the bound
        is dropped."""
        assert self.transport is not None
        self.transport.write(data)
        if self.transport.get_write_buffer_size() > MAX_OUTBOX_BYTES:
            self._too_slow()

    def _too_slow(self) -> None:
        log.warning("connection %s reads too slowly (over %d bytes unread): dropped", self.number, MAX_OUTBOX_BYTES)
        self._outbox.clear()
        self._outbox_bytes = 0
        self.abort()

    def close(self) -> None:
        """No more output after what is queued; the transport closes once it is written."""
        if self.closed:
            return
        self.closed = True
        if self.transport is None:
            self.flushed.set()
            return
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        """Close now, dropping what the socket has not taken."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        else:
            self.flushed.set()

    def lost(self) -> None:
        """The transport is gone (``connection_lost``)."""
        self.closed = True
        self.read_ended = True
        self.transport = None
        self._outbox.clear()
        self._outbox_bytes = 0
        self.flushed.set()
