"""The HTTP plumbing every fake model server of the agent-CLI tests shares, in one place.

A fake is a :class:`FakeModelServer` subclass that says two things about its API:
``answer(path, body)`` (what the model says to one request, as ``(chat, reply)``: the
request turned into the chat shape of ``tests/pi/fake_openai.py`` and that fake's reply
``{"text", "tool"?, "error"?}``) and ``render(path, body, reply)`` (the reply on its wire:
a JSON body or a list of server-sent events). This module does the rest: a threaded server
on 127.0.0.1 and a free port, JSON bodies in, SSE or JSON out, one log line per request
(``{"time", "path", "body", "chat", "reply"}``), and refusals (a tool the request does not
list, a frame that does not parse) answered as API errors and kept in ``violations``.

The scripted answers themselves are ``fake_openai.answer``'s, so one scenario runs on the
scripted host, pi, Claude Code and these CLIs alike.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent / "pi"))

from fake_openai import ModelRefusal

from roost_core.hosts.scripted import load_scenario


@dataclass
class Wire:
    """One HTTP answer: ``events`` (``(event name or None, data)``) as SSE, else ``json``.
    ``done`` ends an SSE stream with ``data: [DONE]`` (the OpenAI convention)."""

    status: int = 200
    json: Any = None
    events: list[tuple[str | None, Any]] = field(default_factory=list)
    done: bool = False


class FakeModelServer:
    """A scripted model on 127.0.0.1 and a free port, in a thread of the test process."""

    #: Shown in the thread's name.
    api = "fake"

    def __init__(self, scenario: Any, log_path: str | Path) -> None:
        self.scenario = load_scenario(scenario)
        self.log_path = Path(log_path)
        self.lock = threading.Lock()
        #: Every refusal answered, in order (a test fails on any: a real model could not).
        self.violations: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                self.send(fake.get(self.path))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) or b"{}"
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"unparsed": raw.decode(errors="replace")}
                self.send(fake.post(self.path, body))

            def send(self, wire: Wire) -> None:
                if not wire.events:
                    data = json.dumps(wire.json if wire.json is not None else {}).encode()
                    self.send_response(wire.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(wire.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for event, data in wire.events:
                    head = f"event: {event}\n".encode() if event else b""
                    self.wfile.write(head + b"data: " + json.dumps(data).encode() + b"\n\n")
                if wire.done:
                    self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"fake-{self.api}", daemon=True)

    # -- what a subclass says about its API ---------------------------------------------

    def answer(self, path: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The request as chat messages and the model's reply to it (raise
        :class:`ModelRefusal` for what a real model could not do)."""
        raise NotImplementedError

    def render(self, path: str, body: dict[str, Any], reply: dict[str, Any]) -> Wire:
        """The reply on this API's wire (``reply["error"]`` set: an API error)."""
        raise NotImplementedError

    def get(self, path: str) -> Wire:
        """A GET (a model list, say); 404 unless the API needs one."""
        return Wire(404, {"error": {"message": f"no GET {path}"}})

    # -- the plumbing ----------------------------------------------------------------------

    def post(self, path: str, body: dict[str, Any]) -> Wire:
        chat: list[dict[str, Any]] = []
        try:
            chat, reply = self.answer(path, body)
        except ModelRefusal as exc:
            reply = {"error": f"fake model refuses: {exc}"}
            self.violations.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - a scenario or fake bug answers an error the test sees
            reply = {"error": f"fake model: {type(exc).__name__}: {exc}"}
            self.violations.append(reply["error"])
        self.log(path, body, chat, reply)
        return self.render(path, body, reply)

    def log(self, path: str, body: dict[str, Any], chat: list[dict[str, Any]], reply: dict[str, Any]) -> None:
        record = {"time": time.time(), "path": path, "body": body, "chat": chat, "reply": reply}
        with self.lock, open(self.log_path, "a") as fh:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")

    def requests(self) -> list[dict[str, Any]]:
        """Every request logged so far, in order."""
        try:
            lines = self.log_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeModelServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
