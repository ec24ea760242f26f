"""The private channel between an agent CLI's short-lived helpers and the long-lived roost
process that speaks for its session (the bridged hosts', :mod:`roost_core.hosts.bridged`).

An agent CLI runs a hook as a new process for every event, and a stdio MCP server as its
child. Both reach the roost side of the session over a Unix socket: a background job's
host (the socket is in ``ROOST_BRIDGE``) or, for a user's own agent CLI, the ``roost mcp``
server it started (the socket is named after that agent process, see
:func:`roost_core.hookrelay.foreground_socket`). The socket is 0600 in a 0700 folder, and
the listener asks the kernel who connected: only the agent process and its descendants
are served.

Frames are JSON lines: ``{"id", "op", ...}`` in, ``{"id", "ok", "result" | "error"}`` out.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketAttribute

from roost_core import locks, platform

# The blocking client side and the foreground socket's name are the hook relay's, which
# must start without this module's imports.
from roost_core.hookrelay import MAX_FRAME, checked_line, foreground_socket, request
from roost_core.worker.proctree import MARK_VARIABLE

log = logging.getLogger("roost.bridge")

MAX_SOCKET_PATH = 107
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

__all__ = ["MAX_FRAME", "AsyncBridgeClient", "BridgeClosed", "BridgeServer", "checked_line", "foreground_socket", "private_folder", "request"]


def private_folder() -> Path:
    """A fresh 0700 folder whose socket path fits in ``sun_path``: in a worker, its
    :func:`roost_core.paths.worker_folder`; elsewhere a new temp folder."""
    mark = os.environ.get(MARK_VARIABLE)
    if mark:
        from roost_core.paths import private_dir, short_socket_dir, worker_folder

        private_dir(short_socket_dir())
        folder = worker_folder(mark)
        # The mark is this worker's own: a folder of that name is from a bridge it closed.
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(mode=0o700)
        return folder
    folder = Path(tempfile.mkdtemp(prefix="roost-cc-"))
    if len(os.fsencode(str(folder / "bridge.sock"))) <= MAX_SOCKET_PATH:
        return folder
    folder.rmdir()
    from roost_core.paths import private_dir, short_socket_dir

    # The per-user short-socket folder always leaves room for "cc-XXXXXXXX/bridge.sock".
    return Path(tempfile.mkdtemp(prefix="cc-", dir=private_dir(short_socket_dir())))


def peer_pid(stream: Any) -> int | None:
    try:
        pid, _uid = platform.peer_credentials(stream.extra(SocketAttribute.raw_socket))
    except anyio.TypedAttributeLookupError:
        return None
    return pid or None


class BridgeServer:
    """Serves ``handler`` on a Unix socket to the descendants of one process.

    A host serves it for the length of a run (:meth:`serve`, cancelled at the run's end),
    but an agent process may outlive runs, and its MCP server keeps one connection for its
    whole life: a connection that waits between requests when the serving ends is kept
    (:attr:`kept`) and served again by the next :meth:`serve`, so what it asks between runs
    is answered in the next one, never dropped."""

    def __init__(self, path: Path, handler: Handler, owner: Callable[[], int | None]) -> None:
        self.path = path
        self.handler = handler
        #: The pid whose descendants may connect (read at each accept: the Claude Code
        #: process may start after the listener).
        self.owner = owner
        self.listener: Any = None
        #: Trusted connections whose serving ended between requests, each with the part
        #: of a request read so far.
        self.kept: list[tuple[Any, bytes]] = []

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        old_umask = os.umask(0o077)
        try:
            self.listener = await anyio.create_unix_listener(self.path)
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)

    async def serve(self) -> None:
        """Serve the kept connections again and accept new ones until cancelled; each one
        is served in its own task."""
        assert self.listener is not None
        async with anyio.create_task_group() as tg:
            kept, self.kept = self.kept, []
            for stream, buffer in kept:
                tg.start_soon(self.serve_one, stream, buffer, True)
            while True:
                stream = await self.listener.accept()
                tg.start_soon(self.serve_one, stream)

    def trusted(self, stream: Any) -> bool:
        owner = self.owner()
        pid = peer_pid(stream)
        return owner is not None and pid is not None and locks.is_descendant(pid, owner)

    async def serve_one(self, stream: Any, buffer: bytes = b"", checked: bool = False) -> None:
        """Answer ``stream``'s requests until it closes. Cancelled while it waits for its
        next request, it is kept for the next :meth:`serve`; cancelled while a request is
        answered, it is closed (its caller sees the connection end, not a lost answer)."""
        kept = False
        try:
            if not checked and not self.trusted(stream):
                return
            while True:
                try:
                    data = await stream.receive(256 * 1024)
                except anyio.get_cancelled_exc_class():
                    self.kept.append((stream, buffer))
                    kept = True
                    raise
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    return
                buffer += data
                if len(buffer) > MAX_FRAME and b"\n" not in buffer[:MAX_FRAME + 1]:
                    # A hook's input this large (a huge tool output) is not read: say so
                    # to the log and to the caller, rather than close without a word.
                    log.error("a bridge request longer than %d bytes was refused (its connection is closed)", MAX_FRAME)
                    refusal = {"id": None, "ok": False, "error": {"code": "frame_too_large", "message": f"request longer than {MAX_FRAME} bytes", "limit": MAX_FRAME}}
                    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                        await stream.send(json.dumps(refusal).encode() + b"\n")
                    return
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        answer = await self.answer(line)
                        try:
                            await stream.send(json.dumps(answer, ensure_ascii=False).encode() + b"\n")
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                            return
        finally:
            if not kept:
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await stream.aclose()

    async def answer(self, line: bytes) -> dict[str, Any]:
        try:
            frame = json.loads(line)
            if not isinstance(frame, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            return {"id": None, "ok": False, "error": {"code": "bad_json", "message": str(exc)}}
        try:
            result = await self.handler(frame)
            return {"id": frame.get("id"), "ok": True, "result": result}
        except Exception as exc:  # one bad request never ends the bridge
            log.exception("bridge op %s failed", frame.get("op"))
            return {"id": frame.get("id"), "ok": False, "error": {"code": "internal", "message": str(exc)}}

    async def close(self) -> None:
        kept, self.kept = self.kept, []
        for stream, _ in kept:
            with contextlib.suppress(Exception):
                await stream.aclose()
        if self.listener is not None:
            with contextlib.suppress(Exception):
                await self.listener.aclose()
            self.listener = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class BridgeClosed(RuntimeError):
    """The worker's end of the bridge closed before it answered (the worker ended)."""


class AsyncBridgeClient:
    """A long-lived async client (the job's MCP server talks to its worker over one)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.buffer = b""
        self.ids = 0
        self.lock = anyio.Lock()

    @classmethod
    async def connect(cls, path: str | Path) -> AsyncBridgeClient:
        return cls(await anyio.connect_unix(str(path)))

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        # One request at a time: answers come back in order on one connection.
        async with self.lock:
            self.ids += 1
            try:
                await self.stream.send(checked_line({"id": self.ids, "op": op, **args}))
                while b"\n" not in self.buffer:
                    data = await self.stream.receive(256 * 1024)
                    self.buffer += data
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
                raise BridgeClosed(f"bridge_closed: the roost worker closed the bridge before answering {op!r} ({type(exc).__name__})") from exc
            line, self.buffer = self.buffer.split(b"\n", 1)
        answer = json.loads(line)
        if not answer.get("ok"):
            error = answer.get("error") or {}
            raise RuntimeError(f"{error.get('code', 'error')}: {error.get('message', '')}")
        return answer.get("result") or {}

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.stream.aclose()
