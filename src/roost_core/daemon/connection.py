"""One client connection: batched reads, one gathered write per wake-up, its own error
boundary. What it is bound to (a job's worker, a foreground peer, or nothing) decides
which ops it may call and who it speaks as.

Reads, on asyncio: the socket stays registered with the loop for as long as the
connection reads (as an asyncio ``Protocol``'s would), and its callback reads what is
there and hands it to ``on_data`` at once: no task is woken and no watch is added and
removed per read. ``pause_reading``/``resume_reading`` take the socket off the loop and
back, so a client that sends faster than its requests are done waits in its own socket.
Off asyncio, the connection's task reads with :meth:`Connection.receive`.

Writes: every frame queued in one pass of the event loop goes out in one ``send``. On
asyncio that send is made by a loop callback straight on the socket (no task to wake);
when the socket is full, or off asyncio, the connection's writer task sends instead, and
keeps sending until nothing waits, so bytes always leave in the order they were queued.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
from anyio.abc import SocketAttribute

from roost_core.protocol import decode_answer, encode

if TYPE_CHECKING:
    from roost_core.daemon.jobs import Job
    from roost_core.daemon.peers import ForegroundPeer
    from roost_core.store import Commit

log = logging.getLogger("roost.daemon")

#: A connection whose unread output passes this is too slow to keep; it is dropped.
MAX_OUTBOX_BYTES = 64 * 1024 * 1024
READ_SIZE = 256 * 1024


def peer_credentials(stream: Any) -> tuple[int, int]:
    """(pid, uid) of the process at the other end, as the kernel saw it at connect."""
    try:
        raw = stream.extra(SocketAttribute.raw_socket)
        creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", creds)
        return pid, uid
    except (OSError, anyio.TypedAttributeLookupError):
        return 0, -1


def raw_socket(stream: Any) -> socket.socket | None:
    if stream is None:
        return None
    try:
        return stream.extra(SocketAttribute.raw_socket)
    except anyio.TypedAttributeLookupError:
        return None


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or None (another backend, or no loop at all)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Connection:
    def __init__(self, stream: Any, number: int, *, credentials: tuple[int, int] | None = None) -> None:
        self.stream = stream
        self.number = number
        self.pid, self.uid = credentials if credentials is not None else peer_credentials(stream)
        self.job: Job | None = None
        self.peer: ForegroundPeer | None = None
        #: A warm worker's slot (``warm_hello``), until a job adopts it.
        self.warm: Any = None
        self.watching = False
        self._outbox: list[bytes] = []
        self._outbox_bytes = 0
        self._wake = anyio.Event()
        self.closed = False
        self.flushed = anyio.Event()
        self.raw = raw_socket(stream)
        self.loop = asyncio_loop() if self.raw is not None else None
        self._flush_soon = False  # a flush callback is scheduled
        self._writer_owns = False  # the writer task sends: the socket was full, or it writes now
        #: Requests accepted and waiting for their journal commit to be answered.
        self.pending = 0
        self._drained: anyio.Event | None = None
        #: The commit the newest pending answer waits for (answers leave in request order).
        self.last_commit: Commit | None = None
        self._sending = 0  # bytes the writer task is sending now
        self._on_data: Callable[[bytes], None] | None = None
        self._reading = False  # the socket is registered with the loop for reading
        self.read_ended = False
        #: Requests that wait for the connection's task (an op that awaits), in order;
        #: while any waits, later requests join them so that none overtakes another.
        #: (A list, and the event made when the task first waits: most connections never
        #: queue anything, and an idle peer's memory counts.)
        self.lane: list[Any] = []
        self._lane_wake: anyio.Event | None = None

    @classmethod
    def detached(cls, number: int, *, pid: int, uid: int) -> Connection:
        """A connection with no socket, as if process ``pid`` of user ``uid`` had
        connected: the daemon's op logic runs on it with no I/O, and what it sends stays
        queued for :meth:`take_sent` (the op logic's tests need no socket)."""
        return cls(None, number, credentials=(pid, uid))

    def take_sent(self) -> list[dict[str, Any]]:
        """The frames queued for this client and not written, decoded; the queue emptied.
        (A detached connection keeps all it was sent.)"""
        frames = [decode_answer(line) for data in self._outbox for line in data.splitlines() if line]
        self._outbox.clear()
        self._outbox_bytes = 0
        return frames

    @property
    def unsent(self) -> int:
        """Bytes queued for this client that its socket has not taken yet."""
        return self._outbox_bytes + self._sending

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

    def answered_pending(self) -> None:
        self.pending -= 1
        if self.pending == 0 and self._drained is not None:
            self._drained.set()

    def wait_for(self, commit: Commit) -> None:
        """One more answer of this connection waits for ``commit``."""
        self.pending += 1
        self.last_commit = commit

    def answer(self, frame: dict[str, Any]) -> None:
        """Send an answer that needs no wait of its own, after every answer still waiting
        for a commit (a commit's callbacks run in the order they were added, and commits
        finish in order, so hanging it on the newest one keeps request order)."""
        if self.pending == 0 or self.last_commit is None:
            self.send(frame)
            return
        self.pending += 1

        def send_now(_commit: Any) -> None:
            try:
                self.send(frame)
            finally:
                self.answered_pending()

        self.last_commit.when_done(send_now)

    def send(self, frame: dict[str, Any]) -> None:
        """Queue a frame; everything queued in one pass of the loop leaves in one write."""
        if self.closed:
            return
        data = encode(frame)
        self._outbox.append(data)
        self._outbox_bytes += len(data)
        if self._outbox_bytes > MAX_OUTBOX_BYTES:
            self.closed = True
        if self.closed or self._writer_owns or self.loop is None:
            self._wake.set()
        elif not self._flush_soon:
            self._flush_soon = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """The loop callback: one non-blocking send of the whole outbox."""
        self._flush_soon = False
        if self._writer_owns or not self._outbox:
            return
        if self.closed:
            self._wake.set()  # the writer task writes what is left, as close() expects
            return
        assert self.raw is not None
        data = b"".join(self._outbox)
        self._outbox.clear()
        self._outbox_bytes = 0
        try:
            sent = self.raw.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.close()  # as a failed write of the writer task: this connection is done
            return
        if sent < len(data):
            # The socket is full: the writer task waits for room and sends the rest first.
            rest = data[sent:]
            self._outbox.insert(0, rest)
            self._outbox_bytes += len(rest)
            self._writer_owns = True
            self._wake.set()

    @property
    def can_read_by_callback(self) -> bool:
        """Reads can come from a loop callback (asyncio, with the raw socket)."""
        return self.loop is not None

    def start_reading(self, on_data: Callable[[bytes], None]) -> None:
        """Hand every read to ``on_data`` from the loop's callback until the client's
        stream ends or fails (then ``read_ended``; see the module docstring)."""
        self._on_data = on_data
        self.resume_reading()

    def pause_reading(self) -> None:
        if self._reading:
            assert self.loop is not None and self.raw is not None
            self.loop.remove_reader(self.raw.fileno())
            self._reading = False

    def resume_reading(self) -> None:
        if self._reading or self.read_ended or self._on_data is None:
            return
        assert self.loop is not None and self.raw is not None
        fd = self.raw.fileno()
        if fd < 0:
            self.stop_reading()
            return
        self.loop.add_reader(fd, self._read_ready)
        self._reading = True

    def stop_reading(self) -> None:
        """No more reads (the socket must leave the loop before it is closed)."""
        self.pause_reading()
        self.read_ended = True
        self._wake_lane()

    def _read_ready(self) -> None:
        """The loop's read callback: one read per pass, so no client starves the rest."""
        assert self.raw is not None and self._on_data is not None
        try:
            data = self.raw.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.stop_reading()
            return
        try:
            self._on_data(data)
        except Exception:  # noqa: BLE001 - the connection's boundary: log and drop this client only
            log.exception("connection %s failed", self.number)
            self.close()
            self.stop_reading()

    async def receive(self) -> bytes:
        """The next bytes from the client (up to :data:`READ_SIZE`); ``EndOfStream`` at its end.

        On asyncio: straight from the socket, waiting on its file descriptor when there is
        nothing to read (what the stream does, without its per-read overhead). A read that
        found data without waiting still lets the other tasks run first, so a client that
        keeps its socket full cannot starve the rest."""
        if self.loop is None:
            return await self.stream.receive(READ_SIZE)
        assert self.raw is not None
        waited = False
        while True:
            try:
                data = self.raw.recv(READ_SIZE)
            except (BlockingIOError, InterruptedError):
                fd = self.raw.fileno()
                if fd < 0:
                    raise anyio.ClosedResourceError
                await _readable(self.loop, fd)
                waited = True
                continue
            if not waited:
                await anyio.lowlevel.checkpoint()
            if not data:
                raise anyio.EndOfStream
            return data

    async def writer(self) -> None:
        try:
            await self._write_loop()
        finally:
            self.flushed.set()

    async def _write_loop(self) -> None:
        while not self.closed or self._outbox:
            await self._wake.wait()
            self._wake = anyio.Event()
            if not self._outbox:
                self._writer_owns = False
                continue
            # Frames queued while this write waits wake this task again (not the callback).
            self._writer_owns = True
            data = b"".join(self._outbox)
            self._outbox.clear()
            self._outbox_bytes = 0
            self._sending = len(data)
            try:
                await self.stream.send(data)
            finally:
                self._sending = 0
            if self.closed:
                break
            if not self._outbox:
                self._writer_owns = False

    def to_lane(self, frame: Any) -> None:
        """Queue a request for the connection's task."""
        self.lane.append(frame)
        self._wake_lane()

    def _wake_lane(self) -> None:
        if self._lane_wake is not None:
            self._lane_wake.set()

    async def lane_wait(self) -> None:
        """Until a request joins the lane, reading ends or the connection closes."""
        while not self.lane and not self.read_ended and not self.closed:
            self._lane_wake = anyio.Event()
            await self._lane_wake.wait()

    def close(self) -> None:
        self.closed = True
        self._wake.set()
        self._wake_lane()


async def _readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Until ``fd`` has something to read (or is at its end)."""
    future = loop.create_future()
    loop.add_reader(fd, _set_done, future)
    try:
        await future
    finally:
        loop.remove_reader(fd)


def _set_done(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
