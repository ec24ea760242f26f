"""The plumbing the fake model servers share (``tests/pi/fake_openai.py``,
``tests/claude/fake_anthropic.py``): an HTTP server on 127.0.0.1 and a free port, in a
thread of the test process; the scenario it plays; every request logged as one JSON line;
and the refusals it answered, kept so that the kits fail the test on any.

What each fake adds is its wire format: how a request becomes the scenario's input, and
how the answer goes out (``post``, and ``get`` where the API has one).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from roost_core.hosts.scripted import load_scenario


class ModelRefusal(ValueError):
    """What a real model could not do with a request: call a tool the request does not
    list, or read an agent item whose frame does not parse. The fake answers it as an API
    error and keeps it (``violations``), so the test fails naming it instead of passing on
    a behaviour no real model has."""


class FakeModelServer:
    """A fake model API serving one scenario; subclasses speak its wire format."""

    #: The server thread's name.
    name = "fake-model"

    def __init__(self, scenario: Any, log_path: str | Path) -> None:
        self.scenario = load_scenario(scenario)
        self.log_path = Path(log_path)
        self.lock = threading.Lock()
        #: Every :class:`ModelRefusal` answered, in order (the kits fail a test that has any).
        self.violations: list[str] = []
        #: ``hold(reply)`` true: that answer waits until ``release`` is set (``holding``
        #: says it waits), so a test can act while the model is "thinking". A fake that
        #: holds calls :meth:`wait_if_held` before it sends an answer.
        self.hold: Any = None
        self.holding = threading.Event()
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                fake.get(self)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                fake.post(self, json.loads(self.rfile.read(length) or b"{}"))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name=self.name, daemon=True)

    # -------------------------------------------------------------- the wire format

    def post(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        """Answer one POST whose JSON body is ``body``."""
        raise NotImplementedError

    def get(self, handler: BaseHTTPRequestHandler) -> None:
        """Answer one GET (none by default: 404)."""
        send_json(handler, 404, {"error": {"message": handler.path}})

    def wait_if_held(self, reply: dict[str, Any]) -> None:
        """Hold ``reply`` until :attr:`release` is set, if :attr:`hold` says so (two minutes
        at the most, so a test that never releases it fails rather than hangs)."""
        if self.hold is not None and self.hold(reply):
            self.holding.set()
            self.release.wait(120)

    def reply(self, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The model's answer (``compute()``), or the error a real API would give: a
        :class:`ModelRefusal` (kept in :attr:`violations`) or a scenario bug."""
        try:
            return compute()
        except ModelRefusal as exc:
            self.violations.append(str(exc))
            return {"error": f"fake model refuses: {exc}"}
        except Exception as exc:  # noqa: BLE001 - a scenario bug answers an error
            return {"error": f"fake model: {type(exc).__name__}: {exc}"}

    # -------------------------------------------------------------- the request log

    def logged(self, body: dict[str, Any]) -> dict[str, Any]:
        """What the log keeps of a request ``body`` besides its time and model."""
        return {}

    def log(self, body: dict[str, Any], reply: dict[str, Any], **fields: Any) -> None:
        """Log one request: its time and model, what :meth:`logged` keeps of it and
        ``fields``, and the answer, as one JSON line. (The benchmark puts its own ``log``
        in place, called with ``body`` and ``reply``.)"""
        record = {"time": time.time(), "model": body.get("model"), **self.logged(body), **fields, "reply": reply}
        with self.lock, open(self.log_path, "a") as fh:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")

    def requests(self) -> list[dict[str, Any]]:
        """Every request logged so far, in order. A line still being written (a large
        request's is written in several pieces) waits for its end: only lines that end
        with a newline are read."""
        try:
            with self.lock:
                text = self.log_path.read_text()
        except FileNotFoundError:
            return []
        complete = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    # -------------------------------------------------------------- the server

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def send_json(handler: BaseHTTPRequestHandler, status: int, data: dict[str, Any]) -> None:
    """A whole JSON answer."""
    payload = json.dumps(data).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


def send_stream(handler: BaseHTTPRequestHandler, events: list[bytes]) -> None:
    """A server-sent event stream of ``events`` (each already framed), then the end of the
    connection, as the model APIs answer a streaming request."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Connection", "close")
    handler.end_headers()
    for event in events:
        handler.wfile.write(event)
    handler.wfile.flush()
    handler.close_connection = True
