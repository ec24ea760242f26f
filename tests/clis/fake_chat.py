"""A fake OpenAI chat-completions API (``POST /v1/chat/completions``, SSE) for OpenCode and
Qwen Code, which both speak it: ``tests/pi/fake_openai.py``'s scripted ``answer`` and SSE
chunks on the fakes' shared plumbing (``clifake``, ``tests/fakemodel.py``), with each CLI's
tool names.

``dialect`` says whose requests these are:

- ``"opencode"``: MCP tools are ``<server>_<tool>`` in ``tools``; a scenario calls them by
  ``<tool>``. ``bash`` is ``bash``. Requests for the model ``fake-title`` (OpenCode's
  ``small_model``: its session titles) are answered with a fixed title, never from the
  scenario.
- ``"qwen"``: MCP tools are deferred: not in ``tools`` but named ``mcp__<server>__<tool>``
  in a ``<system-reminder>``, and called through the bridge tool ``tool_call`` (``{"name",
  "arguments"}``); a scenario calls them by ``<tool>``, and the fake calls them only when
  both the bridge is listed and the reminder names them. ``bash`` is ``run_shell_command``.
  Requests without tools (Qwen Code's own side calls: memory extraction, ...) are answered
  with a fixed text.
"""

from __future__ import annotations

import re
from http.server import BaseHTTPRequestHandler
from typing import Any

from clifake import CliFake, Wire
from fake_openai import answer, content_text, sse_chunks, tools_of
from fakemodel import send_json

SIDE_ANSWER = "Fake title"
TITLE_MODEL = "fake-title"
_QWEN_MCP = re.compile(r"\bmcp__([A-Za-z0-9_-]+?)__([A-Za-z0-9_-]+)\b")
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
#: The first line of every text roost hands Qwen Code (``[roost seq 3 4]``): a model reads
#: past it to the items.
_ROOST_MARKER = re.compile(r"^\[roost seq(?: \d+)+\]\n")


def offered_tools(body: dict[str, Any], dialect: str) -> dict[str, str]:
    """Scenario tool name -> the CLI's tool name, for the tools the request lists."""
    listed = tools_of(body)
    offered: dict[str, str] = {}
    if dialect == "qwen":
        for name in listed:
            offered["bash" if name == "run_shell_command" else name] = name
        if "tool_call" in listed:
            for message in body.get("messages") or []:
                for server, tool in _QWEN_MCP.findall(content_text(message.get("content"))):
                    offered[tool] = f"mcp__{server}__{tool}"
        return offered
    mcp_servers = {str(s) for s in body.get("_mcp_servers", [])}
    for name in listed:
        server, _, tool = name.partition("_")
        offered[tool if tool and server in mcp_servers else name] = name
    return offered


def to_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the scripted ``answer`` reads them: reminders the CLI adds to user
    texts and roost's marker line taken off; user texts left empty dropped."""
    chat: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "user":
            text = _ROOST_MARKER.sub("", _REMINDER.sub("", content_text(message.get("content"))).strip())
            if not text:
                continue
            chat.append({**message, "content": text})
        else:
            chat.append(message)
    return chat


class FakeChat(CliFake):
    """The chat-completions fake for one CLI (``dialect``), with the MCP ``servers`` it has
    (OpenCode's names ``<server>_<tool>`` are told from built-in names by them)."""



    def __init__(self, scenario: Any, log_path: Any, *, dialect: str, servers: tuple[str, ...] = ()) -> None:
        super().__init__(scenario, log_path)
        self.dialect = dialect
        self.servers = servers

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def get(self, handler: BaseHTTPRequestHandler) -> None:
        """The model list (``GET /v1/models``)."""
        send_json(handler, 200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}, {"id": TITLE_MODEL, "object": "model"}]})

    def answer(self, path: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        if not path.startswith("/v1/chat/completions"):
            return [], {"error": f"fake chat: no POST {path}"}
        chat = to_chat(body.get("messages") or [])
        if body.get("model") == TITLE_MODEL or (self.dialect == "qwen" and not body.get("tools")):
            return chat, {"text": SIDE_ANSWER, "side": True}
        offered = offered_tools({**body, "_mcp_servers": self.servers}, self.dialect)
        reply = answer(self.scenario, {"model": body.get("model", ""), "messages": chat}, tools=set(offered))
        if reply.get("tool"):
            name, args = reply["tool"]
            if name == "bash":
                args = {"command": args.get("command", ""), **({"description": "scenario step"} if self.dialect == "opencode" else {})}
            real = offered[name]
            if self.dialect == "qwen" and real.startswith("mcp__"):
                reply = {**reply, "tool": ("tool_call", {"name": real, "arguments": args})}
            else:
                reply = {**reply, "tool": (real, args)}
        return chat, reply

    def render(self, path: str, body: dict[str, Any], reply: dict[str, Any]) -> Wire:
        if "error" in reply:
            return Wire(400, {"error": {"message": reply["error"], "type": "invalid_request_error"}})
        return Wire(events=[(None, chunk) for chunk in sse_chunks(str(body.get("model", "fake-model")), reply)], done=True)
