"""Clients of the daemon: the async one for workers and foreground sessions, and (from
:mod:`roost_core.blockingclient`, which the CLI imports alone) the blocking one and the
daemon's auto-start.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketAttribute

from roost_core.blockingclient import (
    STARTUP_TIMEOUT,
    Client,
    DaemonUnavailable,
    NotSent,
    check_start_failure,
    connect,
    daemon_command,
    start_daemon,
    wait_for_daemon,
)
from roost_core.protocol import (
    FrameDecoder,
    ProtocolError,
    decode_answer,
    encode,
    error_of,
    request_too_large,
)

__all__ = [
    "KEYED_OPS", "REASK_SECONDS", "STARTUP_TIMEOUT", "AsyncClient", "Client", "DaemonUnavailable", "NotSent",
    "check_start_failure", "connect", "daemon_command", "dumps", "new_key", "start_daemon", "wait_for_daemon",
]

log = logging.getLogger("roost.client")

EventHandler = Callable[[dict[str, Any]], Awaitable[None] | None]

#: Bytes read from the socket at once.
READ_SIZE = 256 * 1024
#: Frames read but not yet dispatched (an event handler is slow) past which the client
#: stops reading until they are: the daemon then holds what follows, as it would for a
#: client that reads nothing.
MAX_UNDISPATCHED = 1024


class _EventWaiter:
    """A request's answer where asyncio's futures are not to be had (another anyio
    backend): an event and the value it brings. Awaited like a future."""

    __slots__ = ("error", "event", "value")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def done(self) -> bool:
        return self.event.is_set()

    def set_result(self, value: Any) -> None:
        self.value = value
        self.event.set()

    def set_exception(self, error: BaseException) -> None:
        self.error = error
        self.event.set()

    async def wait(self) -> Any:
        await self.event.wait()
        if self.error is not None:
            raise self.error
        return self.value

    def __await__(self) -> Any:
        return self.wait().__await__()


class AsyncClient:
    """An async client: concurrent requests matched by id; events go to ``on_event``.

    ``run`` reads until the daemon goes away; then pending requests fail with
    :class:`DaemonUnavailable`. Frames are handled in the order they came: an event's
    handler (awaited when it returns an awaitable) runs before whatever came after it.

    On asyncio, with a stream that exposes its socket (anyio's Unix stream), the client
    uses the socket itself, which is what keeps it cheap: the socket stays registered
    for reading while ``run`` runs (no watch added and removed per read); an answer that
    nothing queues behind is handed to its caller straight from the read (no task woken
    but the caller's); a request is written with no lock and no checkpoint, the first of
    a pass of the loop at once and the others of that pass in one write at its end, and
    waits only when the socket is full (what does not fit waits in order for room). Any
    other stream (a wrapper, another backend) goes through ``receive``/``send`` under a
    lock, as before.
    """

    def __init__(self, stream: Any, on_event: EventHandler | None = None) -> None:
        self.stream = stream
        self.on_event = on_event
        self._ids = itertools.count(1)
        #: Request id -> its waiter (an asyncio future, or :class:`_EventWaiter`).
        self._waiting: dict[int, Any] = {}
        self._send_lock = anyio.Lock()
        self.closed = anyio.Event()
        # The socket used directly, and the stream it was found for (``stream`` may be
        # replaced before ``run``, e.g. by a wrapper).
        self._socket_of: Any = None
        self._socket: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Writing: bytes that did not fit in the socket, in order, and the event that
        # tells their writers they have left.
        self._backlog: bytearray | None = None
        self._room: anyio.Event | None = None
        self._send_error: OSError | None = None
        # Writes of this pass of the loop after its first (None: no write yet), and the
        # requests they carry.
        self._gathered: list[bytes] | None = None
        self._gathered_ids: list[int] = []
        # Reading: the socket registered for reading, frames waiting for ``run``.
        self._reading: socket.socket | None = None
        self._paused = False
        self._ended = False
        self._inbox: collections.deque[Any] = collections.deque()
        self._wakeup: asyncio.Future[None] | None = None
        self._decoder = FrameDecoder(decode=decode_answer)

    @classmethod
    async def open(cls, path: str | Path, on_event: EventHandler | None = None) -> AsyncClient:
        try:
            stream = await anyio.connect_unix(str(path))
        except OSError as exc:
            raise DaemonUnavailable(str(exc)) from exc
        return cls(stream, on_event)

    def _direct_socket(self) -> socket.socket | None:
        """The stream's socket, when this client may use it directly (on asyncio)."""
        stream = self.stream
        if stream is not self._socket_of:
            self._socket_of, self._socket, self._loop = stream, None, None
            try:
                loop = asyncio.get_running_loop()
                raw = stream.extra(SocketAttribute.raw_socket)
            except (RuntimeError, AttributeError, anyio.TypedAttributeLookupError):
                pass
            else:
                self._socket, self._loop = raw, loop
        return self._socket

    def _new_waiter(self) -> Any:
        if self._loop is not None:
            return self._loop.create_future()
        try:
            return asyncio.get_running_loop().create_future()
        except RuntimeError:
            return _EventWaiter()

    # ------------------------------------------------------------------ reading

    async def run(self) -> None:
        try:
            sock = self._direct_socket()
            if sock is None:
                await self._run_stream()
            else:
                await self._run_direct(sock)
        finally:
            self.closed.set()
            for waiter in self._waiting.values():
                if not waiter.done():
                    waiter.set_exception(DaemonUnavailable("daemon connection lost"))
            self._waiting.clear()

    async def _run_stream(self) -> None:
        decoder = FrameDecoder(decode=decode_answer)
        while True:
            try:
                data = await self.stream.receive(READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return
            for frame in decoder.feed(data):
                await self._dispatch(frame)

    async def _run_direct(self, sock: socket.socket) -> None:
        loop = self._loop
        assert loop is not None
        if self._ended or sock.fileno() < 0:
            return  # closed before it ran: nothing to read
        self._reading = sock
        loop.add_reader(sock, self._readable, sock)
        try:
            while True:
                while self._inbox:
                    await self._dispatch(self._inbox.popleft())
                if self._ended:
                    return
                if self._paused and self._reading is not None:
                    self._paused = False
                    loop.add_reader(sock, self._readable, sock)
                self._wakeup = loop.create_future()
                await self._wakeup
        finally:
            self._wakeup = None
            self._stop_reading()

    def _readable(self, sock: socket.socket) -> None:
        """The loop's callback while the socket has something to read."""
        try:
            data = sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._ended = True
            self._stop_reading()
            self._wake_run()
            return
        inbox = self._inbox
        for frame in self._decoder.feed(data):
            if inbox or type(frame) is not dict or "event" in frame:
                inbox.append(frame)  # ``run`` takes it, in order
            else:
                self._answer(frame)
        if inbox:
            self._wake_run()
            if len(inbox) > MAX_UNDISPATCHED and not self._paused:
                self._paused = True
                assert self._loop is not None
                self._loop.remove_reader(sock)

    def _wake_run(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    def _stop_reading(self) -> None:
        sock, self._reading = self._reading, None
        if sock is not None and self._loop is not None:
            self._loop.remove_reader(sock)

    async def _dispatch(self, frame: Any) -> None:
        if not isinstance(frame, dict):
            if isinstance(frame, ProtocolError):
                # The daemon never writes such a frame on purpose (an item longer than a
                # frame is refused before it is queued): say so loudly, never drop it unseen.
                log.error("a frame from the daemon could not be read and is lost: %s: %s", frame.code, frame.message)
            return
        if "event" in frame:
            if self.on_event is not None:
                result = self.on_event(frame)
                if result is not None:
                    await result
            return
        self._answer(frame)

    def _answer(self, frame: dict[str, Any]) -> None:
        request_id = frame.get("id")
        waiter = self._waiting.pop(request_id, None) if isinstance(request_id, int) else None
        if waiter is not None and not waiter.done():
            waiter.set_result(frame)

    # ------------------------------------------------------------------ writing

    async def _send(self, data: bytes, request_id: int | None = None) -> None:
        """Write ``data`` after everything written before it (``OSError`` or anyio's
        stream errors when the connection is gone).

        On the direct path, the first write of a pass of the loop goes out at once and
        the others of that pass join one write at its end (concurrent callers answered in
        one read send their next requests together). Should that write fail, the calls it
        carried fail with :class:`NotSent`: their requests never left."""
        sock = self._direct_socket()
        if sock is None:
            async with self._send_lock:
                await self.stream.send(data)
            return
        if self._backlog is None:
            gathered = self._gathered
            if gathered is not None:
                gathered.append(data)
                if request_id is not None:
                    self._gathered_ids.append(request_id)
                return
            try:
                sent = sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            if sent == len(data):
                self._gathered = []
                assert self._loop is not None
                self._loop.call_soon(self._write_gathered, sock)
                return
            # The socket is full: the rest waits for room, and so does whatever follows.
            self._start_backlog(sock, memoryview(data)[sent:])
        else:
            self._backlog += data
        room = self._room
        assert room is not None
        await room.wait()
        if self._send_error is not None:
            raise self._send_error

    def _write_gathered(self, sock: socket.socket) -> None:
        """The loop callback at the end of a pass: what was written after its first write."""
        gathered, ids = self._gathered, self._gathered_ids
        self._gathered, self._gathered_ids = None, []
        if not gathered:
            return
        data = b"".join(gathered)
        if self._backlog is not None:  # closed meanwhile (``aclose``): nothing more leaves
            sent = 0
            error: OSError | None = self._send_error
        else:
            try:
                sent = sock.send(data)
                error = None
            except (BlockingIOError, InterruptedError):
                sent, error = 0, None
            except OSError as exc:
                sent, error = 0, exc
        if error is not None:
            for request_id in ids:
                waiter = self._waiting.pop(request_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_exception(NotSent(str(error)))
            return
        if sent < len(data):
            self._start_backlog(sock, memoryview(data)[sent:])

    def _start_backlog(self, sock: socket.socket, rest: memoryview) -> None:
        assert self._loop is not None
        self._backlog = bytearray(rest)
        self._room = anyio.Event()
        self._loop.add_writer(sock, self._writable, sock)

    def _writable(self, sock: socket.socket) -> None:
        """The loop's callback while a backlog waits for room in the socket."""
        backlog = self._backlog
        if backlog is None:
            return
        try:
            sent = sock.send(backlog)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._send_error = exc
            sent = len(backlog)
        del backlog[:sent]
        if not backlog:
            self._end_backlog(sock)

    def _end_backlog(self, sock: socket.socket) -> None:
        assert self._loop is not None and self._room is not None
        self._loop.remove_writer(sock)
        self._backlog = None
        self._room.set()

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        if self.closed.is_set():
            raise NotSent("daemon connection lost")
        request_id = next(self._ids)
        data = encode({"id": request_id, "op": op, **args})
        too_large = request_too_large(data)
        if too_large is not None:
            raise too_large  # the daemon would discard it and answer with no id: a wait forever
        waiter = self._new_waiter()
        self._waiting[request_id] = waiter
        try:
            try:
                await self._send(data, request_id)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise NotSent(str(exc)) from exc
            frame = await waiter
        finally:
            self._waiting.pop(request_id, None)
        if frame.get("ok"):
            return frame.get("result") or {}
        raise error_of(frame.get("error"))

    async def notify(self, op: str, **args: Any) -> None:
        """Send a request without waiting for its answer (safe inside an event handler)."""
        data = encode({"id": next(self._ids), "op": op, **args})
        too_large = request_too_large(data)
        if too_large is not None:
            raise too_large
        try:
            await self._send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise DaemonUnavailable(str(exc)) from exc

    async def aclose(self) -> None:
        # ``run`` ends, as it does when the stream it reads is closed under it.
        self._stop_reading()
        self._ended = True
        self._wake_run()
        if self._backlog is not None and self._socket is not None:
            # Writers still waiting for room hear that their bytes will not leave.
            self._send_error = OSError("connection closed")
            self._end_backlog(self._socket)
        await self.stream.aclose()


#: Ops that change something: a client sends each with a key of its own, and asks again
#: with the same key when the answer is lost with the connection; the daemon answers what
#: the first ask did (``roost_core.daemon.ledger``), so it is done once, never twice.
KEYED_OPS = frozenset({"send", "spawn", "tool_call", "reply", "start"})
#: How long a keyed request is asked again for while no daemon answers.
REASK_SECONDS = 60.0


def new_key() -> str:
    """A request key: random, so no two requests ever share one."""
    return uuid.uuid4().hex


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=2)
