"""A fake Gemini API (``POST /v1beta/models/M:streamGenerateContent?alt=sse`` and
``:generateContent``) for the real Gemini CLI (``GOOGLE_GEMINI_BASE_URL`` = :attr:`origin`).

Each request's ``contents`` are turned into the chat shape of ``tests/pi/fake_openai.py``
and answered by its scripted ``answer``:

- user ``text`` parts are user inputs, except the context the CLI writes itself (its
  session-setup message); an ``AfterAgent`` hook's denial reason arrives as a plain user
  text and is an input like any other;
- model ``functionCall`` parts are tool calls, user ``functionResponse`` parts tool
  messages (an ``AfterTool`` hook's ``<hook_context>`` rides in the response's output;
  agent items in it, roost's delivery, count as user inputs after the tool message);
- a request without tools (the CLI's own side calls: the session summary, ...) is
  answered with a fixed text and never reaches the scenario.

Tool names: the CLI names MCP tools ``mcp_<server>_<tool>``; a scenario calls them by
``<tool>``. ``bash`` is the CLI's ``run_shell_command``.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from typing import Any

from clifake import CliFake, Wire
from fake_openai import answer, check_frames

_ENVELOPE = re.compile(r"<agent-message [^>\n]*>\n.*?\n</agent-message>", re.DOTALL)
_HOOK_CONTEXT = re.compile(r"<hook_context>(.*?)</hook_context>", re.DOTALL)
_MARKER = re.compile(r"\A\[roost seq(?: \d+)+\]\n?")

USAGE = {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110, "cachedContentTokenCount": 0}
SIDE_ANSWER = "Fake session summary"
#: User texts the CLI writes itself (not the user's input).
_CLI_OWN = ("<session_context>", "This is the Gemini CLI.")


def to_chat(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Gemini ``contents`` as chat messages."""
    chat: list[dict[str, Any]] = []
    for content in contents:
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        if content.get("role") == "model":
            text = "".join(str(p.get("text", "")) for p in parts if "text" in p and not p.get("thought"))
            calls = [{"id": p["functionCall"].get("id") or f"call_{i}", "type": "function",
                      "function": {"name": p["functionCall"].get("name"), "arguments": json.dumps(p["functionCall"].get("args") or {})}}
                     for i, p in enumerate(parts) if "functionCall" in p]
            chat.append({"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})})
            continue
        for part in parts:
            if "functionResponse" in part:
                response = part["functionResponse"]
                output = json.dumps(response.get("response"))
                chat.append({"role": "tool", "tool_call_id": response.get("id"), "content": output})
                # Items an AfterTool hook added (roost's delivery) are inputs of their own.
                # (Gemini CLI escapes the context's "<" and ">": its frames are read unescaped.)
                for context in _HOOK_CONTEXT.findall(str((response.get("response") or {}).get("output", ""))):
                    chat.extend(handed_inputs(html.unescape(context)))
            elif "text" in part and part["text"].strip() and not part["text"].lstrip().startswith(_CLI_OWN):
                chat.extend(handed_inputs(part["text"]))
    return chat


def handed_inputs(text: str) -> list[dict[str, Any]]:
    """A text as user inputs: roost's marker line (``[roost seq ...]``, roost's Gemini
    host's hand-overs) is not part of any; framed agent items are one input each (their
    frames checked); any other text is one input."""
    text = _MARKER.sub("", text, count=1)
    if "<agent-message" in text:
        check_frames(text)
        return [{"role": "user", "content": piece} for piece in _ENVELOPE.findall(text)]
    return [{"role": "user", "content": text}] if text.strip() else []


def offered_tools(body: dict[str, Any]) -> dict[str, str]:
    """Scenario tool name -> Gemini tool name for the tools the request lists."""
    offered: dict[str, str] = {}
    for group in body.get("tools") or []:
        for declaration in group.get("functionDeclarations") or []:
            name = str(declaration.get("name"))
            if name == "run_shell_command":
                offered["bash"] = name
            elif name.startswith("mcp_"):
                offered[name.split("_", 2)[-1]] = name
            else:
                offered[name] = name
    return offered


class FakeGemini(CliFake):
    """The Gemini API fake. It holds an answer as every fake does (``hold``, ``holding``,
    ``release``: :class:`fakemodel.FakeModelServer`), and lets a held one go when it stops."""

    def stop(self) -> None:
        self.release.set()  # an answer still held goes out, so nothing waits on it
        super().stop()

    def answer(self, path: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        if ":streamGenerateContent" not in path and ":generateContent" not in path:
            return [], {"error": f"fake gemini: no POST {path}"}
        chat = to_chat(body.get("contents") or [])
        offered = offered_tools(body)
        if not offered:
            return chat, {"text": SIDE_ANSWER, "side": True}
        reply = answer(self.scenario, {"model": path.split("/models/")[-1].split(":")[0], "messages": chat}, tools=set(offered))
        if reply.get("tool"):
            name, args = reply["tool"]
            if name == "bash":
                args = {"command": args.get("command", ""), "description": "scenario step"}
            reply = {**reply, "tool": (offered[name], args)}
        return chat, reply

    def render(self, path: str, body: dict[str, Any], reply: dict[str, Any]) -> Wire:
        self.wait_if_held(reply)
        if "error" in reply:
            return Wire(400, {"error": {"code": 400, "message": reply["error"], "status": "INVALID_ARGUMENT"}})
        parts: list[dict[str, Any]] = []
        if reply.get("text"):
            parts.append({"text": reply["text"]})
        if reply.get("tool"):
            name, args = reply["tool"]
            parts.append({"functionCall": {"name": name, "args": args, "id": "call_" + uuid.uuid4().hex[:10]}})
        chunk = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": USAGE, "modelVersion": "fake-model", "responseId": uuid.uuid4().hex[:16]}
        if ":streamGenerateContent" in path:
            return Wire(events=[(None, chunk)])
        return Wire(json=chunk)
