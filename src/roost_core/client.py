"""Clients of the daemon: a blocking one for the CLI, an async one for workers and
foreground sessions, and auto-start of the daemon.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio

from roost_core.paths import Paths, resolve_paths
from roost_core.protocol import FrameDecoder, ProtocolError, decode_answer, encode

STARTUP_TIMEOUT = 15.0


class DaemonUnavailable(ConnectionError):
    """No daemon answers on the socket."""


class NotSent(DaemonUnavailable):
    """The request never left: the connection was already gone. Safe to retry."""


class Client:
    """A blocking request/response client (the CLI's). Events are ignored."""

    def __init__(self, path: Path, *, timeout: float = 30.0) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError as exc:
            self.sock.close()
            raise DaemonUnavailable(str(exc)) from exc
        self._decoder = FrameDecoder(decode=decode_answer)
        self._frames: list[Any] = []
        self._ids = itertools.count(1)

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        request_id = next(self._ids)
        try:
            self.sock.sendall(encode({"id": request_id, "op": op, **args}))
        except (BrokenPipeError, ConnectionResetError) as exc:
            # A daemon that refuses the connection (out of fds) answers and closes at once,
            # maybe before this request went out: its answer is still there to read.
            frame = self._refusal()
            if frame is None:
                raise DaemonUnavailable(f"daemon closed the connection ({exc.strerror})") from exc
            err = frame.get("error") or {}
            raise ProtocolError(err.get("code", "unknown"), err.get("message", "")) from exc
        while True:
            frame = self._next_frame()
            if isinstance(frame, dict) and frame.get("id") is None and frame.get("ok") is False and "event" not in frame:
                # The daemon refused the connection itself (``busy``, ``unauthorized``).
                err = frame.get("error") or {}
                raise ProtocolError(err.get("code", "unknown"), err.get("message", ""))
            if isinstance(frame, dict) and frame.get("id") == request_id:
                if frame.get("ok"):
                    return frame.get("result") or {}
                err = frame.get("error") or {}
                raise ProtocolError(err.get("code", "unknown"), err.get("message", ""))

    def _refusal(self) -> dict[str, Any] | None:
        """The refusal frame (``id`` null, an error) the daemon left before it closed, if any."""
        try:
            frame = self._next_frame()
        except (DaemonUnavailable, OSError):
            return None
        if isinstance(frame, dict) and frame.get("id") is None and frame.get("ok") is False:
            return frame
        return None

    def _next_frame(self) -> Any:
        while not self._frames:
            data = self.sock.recv(256 * 1024)
            if not data:
                raise DaemonUnavailable("daemon closed the connection")
            self._frames.extend(self._decoder.feed(data))
        return self._frames.pop(0)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def daemon_command() -> list[str]:
    return [sys.executable, "-m", "roost_core.daemon"]


def start_daemon(paths: Paths, *, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a detached daemon (its own session) logging to the state dir."""
    paths.ensure()
    env = dict(os.environ)
    env.update(extra_env or {})
    with os.fdopen(os.open(paths.daemon_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log_file:
        return subprocess.Popen(
            daemon_command(),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            env=env,
            start_new_session=True,
            close_fds=True,
        )


def wait_for_daemon(paths: Paths, timeout: float = STARTUP_TIMEOUT, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            Client(paths.socket, timeout=2).close()
            return
        except DaemonUnavailable:
            if process is not None and process.poll() is not None:
                # It lost the race to another daemon, which may still be coming up.
                process = None
            time.sleep(0.02)
    raise DaemonUnavailable(f"the daemon did not start within {timeout:.0f}s (see {paths.daemon_log})")


def connect(paths: Paths | None = None, *, autostart: bool = True) -> Client:
    """A client to this user's daemon, starting the daemon when none answers."""
    paths = paths or resolve_paths()
    try:
        return Client(paths.socket)
    except DaemonUnavailable:
        if not autostart:
            raise
    process = start_daemon(paths)
    wait_for_daemon(paths, process=process)
    return Client(paths.socket)


EventHandler = Callable[[dict[str, Any]], Awaitable[None] | None]


class AsyncClient:
    """An async client: concurrent requests matched by id; events go to ``on_event``.

    ``run`` reads until the daemon goes away; then pending requests fail with
    :class:`DaemonUnavailable`.
    """

    def __init__(self, stream: Any, on_event: EventHandler | None = None) -> None:
        self.stream = stream
        self.on_event = on_event
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._send_lock = anyio.Lock()
        self.closed = anyio.Event()

    @classmethod
    async def open(cls, path: str | Path, on_event: EventHandler | None = None) -> AsyncClient:
        try:
            stream = await anyio.connect_unix(str(path))
        except OSError as exc:
            raise DaemonUnavailable(str(exc)) from exc
        return cls(stream, on_event)

    async def run(self) -> None:
        decoder = FrameDecoder(decode=decode_answer)
        try:
            while True:
                try:
                    data = await self.stream.receive(256 * 1024)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return
                for frame in decoder.feed(data):
                    await self._dispatch(frame)
        finally:
            self.closed.set()
            for event, box in self._waiting.values():
                box.append(DaemonUnavailable("daemon connection lost"))
                event.set()
            self._waiting.clear()

    async def _dispatch(self, frame: Any) -> None:
        if not isinstance(frame, dict):
            return
        if "event" in frame:
            if self.on_event is not None:
                result = self.on_event(frame)
                if result is not None:
                    await result
            return
        waiter = self._waiting.pop(frame.get("id"), None) if isinstance(frame.get("id"), int) else None
        if waiter is not None:
            event, box = waiter
            box.append(frame)
            event.set()

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        if self.closed.is_set():
            raise NotSent("daemon connection lost")
        request_id = next(self._ids)
        event, box = anyio.Event(), []
        self._waiting[request_id] = (event, box)
        try:
            async with self._send_lock:
                await self.stream.send(encode({"id": request_id, "op": op, **args}))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self._waiting.pop(request_id, None)
            raise NotSent(str(exc)) from exc
        await event.wait()
        frame = box[0]
        if isinstance(frame, Exception):
            raise frame
        if frame.get("ok"):
            return frame.get("result") or {}
        err = frame.get("error") or {}
        raise ProtocolError(err.get("code", "unknown"), err.get("message", ""))

    async def notify(self, op: str, **args: Any) -> None:
        """Send a request without waiting for its answer (safe inside an event handler)."""
        try:
            async with self._send_lock:
                await self.stream.send(encode({"id": next(self._ids), "op": op, **args}))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise DaemonUnavailable(str(exc)) from exc

    async def aclose(self) -> None:
        await self.stream.aclose()


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=2)
