"""The daemon's socket I/O, and nothing else: one asyncio ``Protocol`` per client
connection, over the transport the loop (uvloop's, in C, when installed) reads and writes.

Reads: the loop hands each read to :meth:`ClientProtocol.data_received`, which reads it
into requests (``Dispatcher.decode``); every request that needs no wait
(``Dispatcher.accept``: a send, an ack) is done there and then. A request whose op awaits
goes to the connection's lane, and one task (started only then) does the lane's requests
in order (``Dispatcher.run``); while the lane holds any, later requests join it, so
none overtakes another. A lane of :data:`LANE_PAUSE` requests pauses reading until it is
empty: the client waits in its own socket.

Writes: ``Connection.send`` queues; one loop callback per pass (``Flusher``) hands each
connection's output to its transport in one write. (``Connection.push``, a foreground
receiver's item, is written at once when nothing is queued before it.)

A connection ends when the client's stream ends (after its lane is done) or the daemon
closes it; it is forgotten (``peer_disconnected``) once its transport is gone and no op
of it is still running, so an op that awaited never binds a connection already dropped.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from roost_core import platform
from roost_core.daemon.connection import Connection, Flusher
from roost_core.daemon.core import Daemon
from roost_core.protocol import UNAUTHORIZED, ProtocolError, error

log = logging.getLogger("roost.daemon")

#: Requests waiting in one connection's lane before its socket is no longer read (until
#: the lane is empty again): a client cannot make the daemon hold more than this.
LANE_PAUSE = 64
#: A refused client's bytes are read and dropped up to these bounds before the close.
REFUSED_DRAIN_BYTES = 1024 * 1024
REFUSED_DRAIN_SECONDS = 5.0


async def serve_socket(daemon: Daemon, sock: socket.socket, number: int, flusher: Flusher) -> None:
    """Serve an accepted client socket (the transport owns it from now on)."""
    conn = Connection(number, credentials=platform.peer_credentials(sock))
    loop = asyncio.get_running_loop()
    try:
        await loop.connect_accepted_socket(lambda: ClientProtocol(daemon, conn, flusher), sock=sock)
    except OSError:
        sock.close()


class ClientProtocol(asyncio.Protocol):
    """One client connection's I/O (see the module docstring)."""

    def __init__(self, daemon: Daemon, conn: Connection, flusher: Flusher) -> None:
        self.daemon = daemon
        self.conn = conn
        self.flusher = flusher
        self.transport: asyncio.Transport | None = None
        self.dispatcher = daemon.dispatcher
        self.decoder = daemon.dispatcher.decoder()
        self.lane_running = False
        self.paused = False
        self.gone = False  # the transport is lost
        self.refused_bytes: int | None = None  # counting what a refused client sends

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """The socket is ours: serve the client, or refuse one of another user."""
        # (uvloop's transports are not subclasses of asyncio's; they do the same.)
        self.transport = transport  # type: ignore[assignment]
        self.conn.attach(transport, self.flusher)  # type: ignore[arg-type]
        self.daemon.connections.add(self.conn)
        if not self.conn.same_user:
            self._refuse(error(None, ProtocolError(UNAUTHORIZED, "this daemon serves its own user only")))

    def data_received(self, data: bytes) -> None:
        """Bytes from the client: each whole request done now or put in the lane."""
        if self.refused_bytes is not None:
            self._drop(len(data))
            return
        conn = self.conn
        try:
            for frame in self.decoder.feed(data):
                if conn.closed:
                    return
                if conn.lane or not self.dispatcher.accept(conn, frame):
                    conn.lane.append(frame)
                    self._start_lane()
            if len(conn.lane) >= LANE_PAUSE and not self.paused and self.transport is not None:
                self.transport.pause_reading()
                self.paused = True
        except Exception:  # the connection's boundary: log and drop this client only
            log.exception("connection %s failed", conn.number)
            conn.close()

    def eof_received(self) -> bool:
        """The client's stream ended: close once its lane is done and every answer that
        waits for a commit is out. True keeps the transport open for those writes."""
        self.conn.read_ended = True
        if self.refused_bytes is not None:
            return False
        if not self.lane_running:
            self.conn.close_when_answered()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        """The socket is closed: forget the connection unless an op of it still runs."""
        self.gone = True
        self.conn.lost()
        if not self.lane_running:
            self._forget()

    def _forget(self) -> None:
        self.daemon.connections.discard(self.conn)
        self.daemon.peer_disconnected(self.conn)

    def _start_lane(self) -> None:
        if not self.lane_running:
            self.lane_running = True
            assert self.daemon.tasks.tg is not None
            self.daemon.tasks.tg.start_soon(self._run_lane, name=f"roost connection {self.conn.number}")

    async def _run_lane(self) -> None:
        conn = self.conn
        try:
            # The request stays in the lane while it is done, so none that comes meanwhile
            # is done before it.
            while conn.lane and not conn.closed:
                await self.dispatcher.run(conn, conn.lane[0])
                del conn.lane[0]
        except Exception:  # the connection's boundary: log and drop this client only
            log.exception("connection %s failed", conn.number)
            conn.close()
        finally:
            self.lane_running = False
            if conn.closed:
                conn.lane.clear()
            if self.gone:
                self._forget()
            elif conn.read_ended:
                conn.close_when_answered()
            elif self.paused and self.transport is not None:
                self.paused = False
                self.transport.resume_reading()

    def _refuse(self, frame: dict[str, Any]) -> None:
        """Answer a client this daemon will not serve so that it can always read why.

        Closing right after the answer would race the client's first write: a write that
        lands after the close fails (``EPIPE``) and the client never reads the refusal.
        So: the answer, then our write side shut (the client reads the answer, then its
        end), then whatever the client writes read and dropped until it closes, within a
        bound of bytes and time."""
        assert self.transport is not None
        self.refused_bytes = 0
        self.conn.send(frame)
        self.conn.flush()
        self.conn.closed = True  # nothing more to send
        if self.transport.can_write_eof():
            self.transport.write_eof()
        asyncio.get_running_loop().call_later(REFUSED_DRAIN_SECONDS, self.transport.close)

    def _drop(self, count: int) -> None:
        assert self.refused_bytes is not None and self.transport is not None
        self.refused_bytes += count
        if self.refused_bytes >= REFUSED_DRAIN_BYTES:
            self.transport.close()
