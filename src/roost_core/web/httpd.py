"""Just enough HTTP/1.1 for one page on 127.0.0.1: requests read from an asyncio stream
(keep-alive, bounded, ``Content-Length`` bodies only), answers written whole.

The surface is four routes for one trusted browser on loopback, so a server library
would add dependencies and start-up time for nothing it needs; what it would have given,
the limits, is here: a header block of at most :data:`MAX_HEAD` bytes (the stream's
limit), a body of at most :data:`MAX_BODY`, a request read within :data:`READ_SECONDS`,
no chunked request bodies (501), one ``Host``.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

import attrs

#: The most a request's line and headers may hold (the StreamReader's limit).
MAX_HEAD = 16 * 1024
#: The most a request's body may hold: a dialog's answer (at most 1 MiB as the daemon
#: takes it) in JSON.
MAX_BODY = 2 * 1024 * 1024
#: How long a connection may take to send a whole request (and stay idle between two).
READ_SECONDS = 60.0


class HttpError(Exception):
    """A request that cannot be served: answered with ``status`` and closed."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@attrs.frozen
class Request:
    method: str
    #: The path, without the query string.
    path: str
    query: dict[str, str]
    #: Header names in lower case.
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


async def read_request(reader: asyncio.StreamReader, *, timeout: float = READ_SECONDS) -> Request | None:
    """The next request on ``reader``; None when the client closed the connection
    between requests (or stayed idle past ``timeout``). Raises :class:`HttpError`."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise HttpError(400, "the request ended inside its headers") from exc
        return None
    except asyncio.LimitOverrunError as exc:
        raise HttpError(431, "the request's headers are too large") from exc
    except (TimeoutError, ConnectionError):
        return None
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes every byte
        raise HttpError(400, "unreadable headers") from exc
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "not an HTTP/1.x request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, "a malformed header line")
        name = name.lower()
        if name in headers and name in ("host", "content-length", "origin", "cookie"):
            raise HttpError(400, f"two {name} headers")
        headers[name] = value.strip()
    if "transfer-encoding" in headers:
        raise HttpError(501, "chunked request bodies are not taken; send a Content-Length")
    body = b""
    length_text = headers.get("content-length")
    if length_text is not None:
        if not length_text.isdigit():
            raise HttpError(400, "a bad Content-Length")
        length = int(length_text)
        if length > MAX_BODY:
            raise HttpError(413, "the request's body is too large")
        try:
            body = await asyncio.wait_for(reader.readexactly(length), timeout)
        except (asyncio.IncompleteReadError, TimeoutError) as exc:
            raise HttpError(400, "the request's body did not arrive") from exc
    split = urlsplit(target)
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return Request(method, split.path, dict(parse_qsl(split.query)), headers, body, keep_alive)


def head_bytes(status: int, headers: list[tuple[str, str]]) -> bytes:
    """A response's status line and headers."""
    reason = HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def response_bytes(status: int, body: bytes, content_type: str, headers: list[tuple[str, str]], *, keep_alive: bool) -> bytes:
    """A whole response: ``headers`` (the guard's among them) and ``body``."""
    all_headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Connection", "keep-alive" if keep_alive else "close"),
        *headers,
    ]
    return head_bytes(status, all_headers) + body
