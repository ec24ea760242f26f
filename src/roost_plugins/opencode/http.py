"""A small HTTP/1.1 client for ``opencode serve`` on 127.0.0.1: JSON requests and the
server-sent event stream (``GET /event``), on anyio, with basic auth.

roost's core has no HTTP client and needs none; this one speaks only what the OpenCode
server answers (a ``Content-Length`` or a chunked body, one request per connection), so the
host adds no dependency.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio

#: OpenCode's basic-auth user when ``OPENCODE_SERVER_USERNAME`` is not set.
USERNAME = "opencode"
#: How long one JSON request may take (the server answers at once; ``prompt_async``
#: returns before the turn runs). A request sent while the server starts can hang.
REQUEST_TIMEOUT = 60.0


class HttpError(RuntimeError):
    """The server answered with an error status, or not as HTTP."""


class Server:
    """One ``opencode serve`` at ``127.0.0.1:port`` with its password."""

    def __init__(self, port: int, password: str) -> None:
        self.port = port
        token = base64.b64encode(f"{USERNAME}:{password}".encode()).decode()
        self.auth = f"Basic {token}"

    async def _open(self, method: str, path: str, body: Any = None) -> tuple[Any, _Body]:
        stream = await anyio.connect_tcp("127.0.0.1", self.port)
        data = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nAuthorization: {self.auth}\r\n"
            f"Accept: application/json, text/event-stream\r\nConnection: close\r\n"
        )
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        try:
            await stream.send(head.encode() + b"\r\n" + data)
            reader = _Body(stream)
            await reader.read_head()
        except BaseException:
            await stream.aclose()
            raise
        return stream, reader

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        """``method path`` with a JSON ``body``: the answer's JSON (None when empty);
        :class:`HttpError` for a status of 400 or more."""
        with anyio.fail_after(REQUEST_TIMEOUT):
            stream, reader = await self._open(method, path, body)
            async with stream:
                data = await reader.read_all()
        if reader.status >= 400:
            raise HttpError(f"opencode serve answered {method} {path} with {reader.status}: {data[:500].decode(errors='replace')}")
        return json.loads(data) if data.strip() else None

    async def events(self, path: str = "/event") -> AsyncIterator[dict[str, Any]]:
        """The server's events, as they come (``data:`` lines of JSON objects)."""
        stream, reader = await self._open("GET", path)
        async with stream:
            if reader.status >= 400:
                raise HttpError(f"opencode serve answered GET {path} with {reader.status}")
            pending = b""
            async for chunk in reader.chunks():
                pending += chunk.replace(b"\r\n", b"\n")
                while b"\n\n" in pending:
                    block, pending = pending.split(b"\n\n", 1)
                    data = b"\n".join(line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:"))
                    try:
                        event = json.loads(data) if data else None
                    except ValueError:
                        continue
                    if isinstance(event, dict):
                        yield event


class _Body:
    """Reads one response: its status and headers, then its body (chunked or not)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.buffer = b""
        self.status = 0
        self.headers: dict[str, str] = {}
        self.eof = False

    async def _more(self) -> bool:
        if self.eof:
            return False
        try:
            self.buffer += await self.stream.receive(256 * 1024)
            return True
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.eof = True
            return False

    async def read_head(self) -> None:
        while b"\r\n\r\n" not in self.buffer:
            if not await self._more():
                raise HttpError("opencode serve closed the connection before answering")
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise HttpError(f"not an HTTP answer: {lines[0]!r}")
        self.status = int(parts[1])
        for line in lines[1:]:
            key, _, value = line.partition(":")
            self.headers[key.strip().lower()] = value.strip()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive."""
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            while True:
                while b"\r\n" not in self.buffer:
                    if not await self._more():
                        return
                size_line, self.buffer = self.buffer.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                while len(self.buffer) < size + 2:
                    if not await self._more():
                        return
                chunk, self.buffer = self.buffer[:size], self.buffer[size + 2:]
                if size == 0:
                    return
                yield chunk
        length = self.headers.get("content-length")
        remaining = int(length) if length is not None and length.isdigit() else None
        while True:
            if self.buffer:
                data = self.buffer if remaining is None else self.buffer[:remaining]
                self.buffer = b""
                if remaining is not None:
                    remaining -= len(data)
                yield data
            if remaining == 0 or not await self._more():
                return

    async def read_all(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])
