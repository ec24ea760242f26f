"""What the agent-CLI fakes (``fake_responses``, ``fake_gemini``, ``fake_chat``) share, on
the fake model servers' one plumbing (``tests/fakemodel.py``: the server, the scenario,
the request log, refusals).

A fake here says two things about its API: ``answer(path, body)`` (the request turned into
the chat shape of ``tests/pi/fake_openai.py`` and the reply of that fake's scripted
``answer``: ``(chat, {"text", "tool"?, "error"?})``) and ``render(path, body, reply)``
(that reply on its wire: a JSON body or server-sent events, as a :class:`Wire`). Each
request is logged with its ``path``, raw ``body``, ``chat`` and ``reply``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from fakemodel import FakeModelServer, send_json, send_stream


@dataclass
class Wire:
    """One HTTP answer: ``events`` (``(event name or None, data)``) as SSE, else ``json``.
    ``done`` ends an SSE stream with ``data: [DONE]`` (the OpenAI convention)."""

    status: int = 200
    json: Any = None
    events: list[tuple[str | None, Any]] = field(default_factory=list)
    done: bool = False


class CliFake(FakeModelServer):
    """A scripted model for one agent CLI's API."""

    def answer(self, path: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The request as chat messages and the model's reply to it (raise
        ``ModelRefusal`` for what a real model could not do)."""
        raise NotImplementedError

    def render(self, path: str, body: dict[str, Any], reply: dict[str, Any]) -> Wire:
        """The reply on this API's wire (``reply["error"]`` set: an API error)."""
        raise NotImplementedError

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def logged(self, body: dict[str, Any]) -> dict[str, Any]:
        """The raw request body, kept whole (tests assert what the CLI sent)."""
        return {"body": body}

    def post(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        """Answer, log and send one request."""
        chat: list[dict[str, Any]] = []

        def compute() -> dict[str, Any]:
            nonlocal chat
            chat, reply = self.answer(handler.path, body)
            return reply

        reply = self.reply(compute)
        if "error" in reply and not reply["error"].startswith("fake model refuses"):
            self.violations.append(reply["error"])  # a fake or scenario bug fails the test too
        self.log(body, reply, path=handler.path, chat=chat)
        send(handler, self.render(handler.path, body, reply))


def send(handler: BaseHTTPRequestHandler, wire: Wire) -> None:
    """A :class:`Wire` through fakemodel's senders."""
    if not wire.events:
        send_json(handler, wire.status, wire.json if wire.json is not None else {})
        return
    frames = [(f"event: {event}\n" if event else "").encode() + b"data: " + json.dumps(data).encode() + b"\n\n" for event, data in wire.events]
    if wire.done:
        frames.append(b"data: [DONE]\n\n")
    send_stream(handler, frames)


#: The scenario most CLI tests run: ``run`` calls the MCP tool ``ping``, then says
#: "pinged"; any other prompt is echoed.
PING = {"run": [{"steps": [{"tool": "ping", "args": {"message": "hello"}}, {"say": "pinged"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]}}


def scripted(fake: FakeModelServer) -> list[dict[str, Any]]:
    """The requests the scenario answered (not a CLI's own side calls: titles, summaries)."""
    return [r for r in fake.requests() if not r["reply"].get("side")]


def users(request: dict[str, Any]) -> list[Any]:
    """The user messages of a logged request's chat, in order."""
    return [m["content"] for m in request["chat"] if m["role"] == "user"]
