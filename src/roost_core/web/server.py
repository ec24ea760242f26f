"""``roost web``: serves the page on 127.0.0.1 and keeps it live from the daemon.

One asyncio loop holds the HTTP server (:mod:`.httpd`), one connection to the daemon
(its ``watch`` stream with receipts, and the ``log`` and ``answer`` ops the CLI uses) and
the pages' event streams. Routes, each behind :class:`~.guard.Guard`:

- ``GET /`` the page (with ``?t=SECRET``: sets the cookie, redirects to ``/``);
- ``GET /static/NAME`` its script and style;
- ``GET /events`` server-sent events: ``snapshot`` first, then ``agents``,
  ``receipts`` and ``daemon`` as they come (JSON data);
- ``GET /api/log?job=ID`` a transcript, rendered as ``roost log`` renders it;
- ``POST /api/answer`` a dialog's answer (``{"job", "text"}``, JSON), as ``roost answer``.

It changes nothing the CLI cannot: answering a dialog is the one change, through the
same op. The daemon's own rule still holds for it: an answer from a process inside a
job's process tree is refused ``not_a_person``, and this server is such a process when an
agent started it; one a person started at a terminal speaks for that person, and the
secret it printed keeps everyone else (another site, an agent without the secret) off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from roost_core.web.guard import SECURITY_HEADERS, Guard, new_secret
from roost_core.web.httpd import (
    MAX_HEAD,
    HttpError,
    Request,
    head_bytes,
    read_request,
    response_bytes,
)
from roost_core.web.model import PageModel, entry_of

log = logging.getLogger("roost.web")

STATIC = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8", "index.html": "text/html; charset=utf-8"}
#: Events a page may have waiting before it is dropped (it reconnects and gets a snapshot).
MAX_QUEUED_EVENTS = 2000
#: A comment line on every stream this often, so a dead page is noticed.
KEEPALIVE_SECONDS = 15.0
#: How long to wait between tries to reach a daemon that went away.
RECONNECT_SECONDS = (0.1, 0.2, 0.5, 1.0, 2.0)


def run(args: argparse.Namespace) -> int:
    """Run ``roost web`` until interrupted."""
    from roost_core.cli_support import user_config

    config, _ = user_config()
    budgets = {"tokens": config.agent_tree_tokens, "cost": config.agent_tree_cost}
    asyncio.run(serve(args.port, budgets, announce=announce))
    return 0


def announce(url: str) -> None:
    print(f"roost web: {url}", flush=True)
    print("Open it in a browser on this machine; the link holds the page's secret, keep it to yourself. Ctrl-C stops it.", flush=True)


def static_bytes(name: str) -> bytes:
    return resources.files("roost_core.web").joinpath("static", name).read_bytes()


class Page:
    """One page's event stream: events wait in a bounded queue; a page that falls too
    far behind is dropped (its EventSource connects again and gets a snapshot)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(MAX_QUEUED_EVENTS)

    def push(self, data: bytes) -> None:
        try:
            self.queue.put_nowait(data)
        except asyncio.QueueFull:
            self.end()

    def end(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)


def sse(name: str, data: dict[str, Any]) -> bytes:
    """One server-sent event of JSON data (one ``data:`` line: JSON holds no newline)."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


class WebServer:
    def __init__(self, guard: Guard, model: PageModel, paths: Any) -> None:
        self.guard = guard
        self.model = model
        self.paths = paths
        self.pages: set[Page] = set()
        self.client: Any = None
        self._pm: Any = None

    # ------------------------------------------------------------ the daemon

    async def follow_daemon(self, ready: asyncio.Event) -> None:
        """Keep one ``watch`` connection to the daemon, and connect again when it goes."""
        from roost_core.client import AsyncClient, DaemonUnavailable

        tries = 0
        while True:
            try:
                client = await AsyncClient.open(self.paths.socket, self.on_event)
            except DaemonUnavailable:
                ready.set()
                await asyncio.sleep(RECONNECT_SECONDS[min(tries, len(RECONNECT_SECONDS) - 1)])
                tries += 1
                continue
            reader = asyncio.ensure_future(client.run())
            try:
                result = await client.call("watch", receipts=True)
            except (DaemonUnavailable, OSError) as exc:
                log.info("the daemon went away at watch: %s", exc)
                reader.cancel()
                continue
            tries = 0
            self.client = client
            self.broadcast("snapshot", self.model.watched(result))
            ready.set()
            with contextlib.suppress(Exception):
                await reader
            self.client = None
            with contextlib.suppress(Exception):
                await client.aclose()
            self.broadcast("daemon", self.model.lost())

    def on_event(self, frame: dict[str, Any]) -> None:
        event = frame.get("event")
        if event == "agents":
            self.broadcast("agents", self.model.take_agents(frame.get("agents") or []))
        elif event == "receipts":
            self.broadcast("receipts", self.model.take_receipts(frame.get("receipts") or []))

    def broadcast(self, name: str, data: dict[str, Any]) -> None:
        if not self.pages:
            return
        event = sse(name, data)
        for page in list(self.pages):
            page.push(event)

    # ------------------------------------------------------------ HTTP

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: its requests in turn, until it closes or one cannot be served."""
        try:
            while True:
                try:
                    request = await read_request(reader)
                except HttpError as exc:
                    writer.write(self.plain(exc.status, exc.reason, keep_alive=False))
                    await writer.drain()
                    return
                if request is None:
                    return
                keep = await self.serve_request(request, writer)
                await writer.drain()
                if not (keep and request.keep_alive):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def serve_request(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        """Answer ``request``; False when the connection is to close after it."""
        headers = request.headers
        verdict = self.guard.check(request.method, headers.get("host"), headers.get("origin"), headers.get("cookie"), request.query.get("t"))
        if verdict.status:
            writer.write(self.plain(verdict.status, verdict.reason, keep_alive=request.keep_alive))
            return True
        if verdict.set_cookie:
            # The secret moves into the cookie and out of the address bar and history.
            writer.write(response_bytes(303, b"", "text/plain", [("Location", request.path or "/"), ("Set-Cookie", self.guard.cookie_header()), *SECURITY_HEADERS], keep_alive=request.keep_alive))
            return True
        route = self.route(request)
        if route is None:
            writer.write(self.plain(404 if request.method in ("GET", "POST") else 405, "no such page", keep_alive=request.keep_alive))
            return True
        return await route(request, writer)

    def route(self, request: Request) -> Callable[[Request, asyncio.StreamWriter], Awaitable[bool]] | None:
        if request.method == "GET":
            if request.path == "/":
                return self.get_static
            if request.path.startswith("/static/") and request.path[len("/static/"):] in STATIC:
                return self.get_static
            if request.path == "/events":
                return self.get_events
            if request.path == "/api/log":
                return self.get_log
        elif request.method == "POST" and request.path == "/api/answer":
            return self.post_answer
        return None

    def plain(self, status: int, text: str, *, keep_alive: bool) -> bytes:
        return response_bytes(status, text.encode() + b"\n", "text/plain; charset=utf-8", list(SECURITY_HEADERS), keep_alive=keep_alive)

    def json_answer(self, status: int, data: Any, *, keep_alive: bool) -> bytes:
        body = json.dumps(data, ensure_ascii=False).encode()
        return response_bytes(status, body, "application/json", list(SECURITY_HEADERS), keep_alive=keep_alive)

    async def get_static(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        name = "index.html" if request.path == "/" else request.path[len("/static/"):]
        writer.write(response_bytes(200, static_bytes(name), STATIC[name], list(SECURITY_HEADERS), keep_alive=request.keep_alive))
        return True

    async def get_events(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        page = Page()
        writer.write(head_bytes(200, [("Content-Type", "text/event-stream"), ("Connection", "keep-alive"), *SECURITY_HEADERS]))
        writer.write(sse("snapshot", self.model.snapshot()))
        self.pages.add(page)
        try:
            await writer.drain()
            while True:
                try:
                    data = await asyncio.wait_for(page.queue.get(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    data = b": keepalive\n\n"
                if data is None:
                    return False
                writer.write(data)
                await writer.drain()
        finally:
            self.pages.discard(page)

    async def get_log(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        from roost_core.protocol import ProtocolError

        job = request.query.get("job")
        if not job:
            writer.write(self.json_answer(400, {"error": {"code": "bad_args", "message": "which job? (?job=ID)"}}, keep_alive=request.keep_alive))
            return True
        try:
            result = await self.call("log", job=job)
            entries = await asyncio.to_thread(self.render, result)
        except ProtocolError as exc:
            writer.write(self.json_answer(404 if exc.code == "not_found" else 400, {"error": exc.to_json()}, keep_alive=request.keep_alive))
            return True
        body = {"id": result["id"], "task": result.get("task"), "state": result.get("state"), "error": result.get("error"), "entries": entries}
        writer.write(self.json_answer(200, body, keep_alive=request.keep_alive))
        return True

    def render(self, result: dict[str, Any]) -> list[dict[str, Any]]:
        """A ``log`` answer's transcript as ``roost log`` renders it (run in a thread: it
        reads files)."""
        from roost_core.cli_support import local_manager
        from roost_core.hosts import registered_hosts, session_lines, transcript_reader
        from roost_core.policy import render_entry
        from roost_core.transcript import received_by_seq

        if self._pm is None:
            self._pm = local_manager()
        spec = registered_hosts(self._pm).get(result.get("host") or "")
        read = transcript_reader(spec)
        receipts = received_by_seq(result.get("received"))
        out = []
        for raw in session_lines(spec, result["session"]):
            for entry in read(raw):
                text = render_entry(self._pm, entry)
                if text:
                    out.append(entry_of(entry, text, receipts))
        return out

    async def post_answer(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        from roost_core.client import new_key
        from roost_core.protocol import ProtocolError

        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            # A form of another site cannot send JSON without asking first (CORS), and
            # nothing here answers that ask.
            writer.write(self.json_answer(415, {"error": {"code": "bad_args", "message": "send the answer as application/json"}}, keep_alive=request.keep_alive))
            return True
        try:
            data = json.loads(request.body)
        except ValueError:
            data = None
        if not (isinstance(data, dict) and isinstance(data.get("job"), str) and isinstance(data.get("text"), str)):
            writer.write(self.json_answer(400, {"error": {"code": "bad_args", "message": "the answer is {job, text}"}}, keep_alive=request.keep_alive))
            return True
        try:
            result = await self.call("answer", job=data["job"], text=data["text"], key=new_key())
        except ProtocolError as exc:
            writer.write(self.json_answer(409 if exc.code in ("no_dialog", "not_an_option") else 400, {"error": exc.to_json()}, keep_alive=request.keep_alive))
            return True
        writer.write(self.json_answer(200, result, keep_alive=request.keep_alive))
        return True

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        """An op on the daemon's connection (``unavailable`` while there is none)."""
        from roost_core.client import DaemonUnavailable
        from roost_core.protocol import ProtocolError

        client = self.client
        if client is None:
            raise ProtocolError("unavailable", "the daemon is not running")
        try:
            result: dict[str, Any] = await client.call(op, **args)
        except DaemonUnavailable as exc:
            raise ProtocolError("unavailable", f"the daemon went away: {exc}") from exc
        return result


async def serve(port: int, budgets: dict[str, Any] | None = None, *, announce: Callable[[str], None] = announce) -> None:
    """Serve the page on ``127.0.0.1:port`` (0: a free one) until cancelled; ``announce``
    is given the link (with the secret) once the page is ready to serve."""
    from roost_core.client import connect
    from roost_core.paths import resolve_paths

    paths = resolve_paths()
    # The daemon starts here if none runs, as for any other command.
    await asyncio.to_thread(lambda: connect(paths).close())
    server_box: list[WebServer] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server_box[0].handle(reader, writer)

    listener = await asyncio.start_server(handle, "127.0.0.1", port, limit=MAX_HEAD)
    bound = listener.sockets[0].getsockname()[1]
    guard = Guard(bound, new_secret())
    web = WebServer(guard, PageModel(budgets), paths)
    server_box.append(web)
    ready = asyncio.Event()
    follower = asyncio.ensure_future(web.follow_daemon(ready))
    try:
        await ready.wait()
        announce(f"http://127.0.0.1:{bound}/?t={guard.secret}")
        async with listener:
            await listener.serve_forever()
    finally:
        follower.cancel()
        for page in list(web.pages):
            page.end()


