"""A fake Anthropic Messages API (``POST /v1/messages``, SSE streaming, tool use) driven by
a roost scenario, for the real Claude Code on 127.0.0.1.

It is the pi kit's fake model (``tests/pi/fake_openai.py``) behind another wire format:
each request's Anthropic messages are turned into the chat shape that fake understands,
so one scenario runs on the scripted host, pi and Claude Code alike. What the turning
does with what Claude Code sends:

- ``system`` entries inside ``messages`` (the environment, hook contexts) are dropped,
  except a hook's additional context holding agent items (roost's ``PostToolUse`` and
  ``UserPromptSubmit`` delivery), which counts as an input of its own per item, as pi's
  custom messages do;
- ``<system-reminder>`` blocks in user text are dropped, unless they carry agent items
  (a blocked ``Stop``'s feedback); "The user sent a new message while you were working:"
  is taken off a steered reply; roost's wake-up prompt is dropped (the items in its hook
  context are the input);
- ``tool_use`` / ``tool_result`` blocks become tool calls and tool messages.

The fake is as strict as a real model (see ``fake_openai``): a tool the request does not
list is never called, and a frame that does not parse is refused; both answer an API
error and are kept in ``violations``.

Scenario tools map onto Claude Code's: ``bash`` is ``Bash``; ``roost_*`` are the MCP tools
``mcp__roost__roost_*``. Every request is logged as a JSON line with the raw body and the
turned messages, so tests can assert what Claude Code sent.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent / "pi"))

from fake_openai import answer, check_frames
from fakemodel import FakeModelServer, send_json, send_stream

from roost_plugins.claude import WAKE_PROMPT

_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
_ENVELOPE = re.compile(r"<agent-message [^>\n]*>\n.*?\n</agent-message>", re.DOTALL)
STEERED_PREFIX = "The user sent a new message while you were working:"
HOOK_CONTEXT = "hook additional context: "


def blocks_of(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


def envelopes(text: str) -> list[str]:
    return _ENVELOPE.findall(text)


def user_inputs(text: str) -> list[str]:
    """The inputs one user text block holds, as a model would read them."""
    if "<agent-message" in text:
        check_frames(text)
        return envelopes(text)
    text = _REMINDER.sub("", text).strip()
    if text.startswith(STEERED_PREFIX):
        text = text[len(STEERED_PREFIX):].strip()
    if not text or text == WAKE_PROMPT:
        return []
    return [text]


def to_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic messages as the chat-completions shape of ``fake_openai``."""
    chat: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        blocks = blocks_of(message.get("content"))
        if role == "assistant":
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            calls = [
                {"id": b.get("id"), "type": "function", "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}}
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            chat.append({"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})})
        elif role == "user":
            for block in blocks:
                if block.get("type") == "tool_result":
                    chat.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": json.dumps(block.get("content"))})
                elif block.get("type") == "text":
                    chat.extend({"role": "user", "content": piece} for piece in user_inputs(block.get("text", "")))
        elif role == "system":
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            if HOOK_CONTEXT in text and "<agent-message" in text:
                check_frames(text)
                chat.extend({"role": "user", "content": piece} for piece in envelopes(text))
    return chat


def claude_tool(name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if name == "bash":
        return "Bash", {"command": args.get("command", ""), "description": "scenario step"}
    if name.startswith("roost_"):
        return f"mcp__roost__{name}", args
    return name, args


def scenario_tools(body: dict[str, Any]) -> set[str]:
    """The request's tools under the scenario's names (``Bash`` is ``bash``, the MCP tools
    ``mcp__roost__roost_*`` are ``roost_*``): what the fake model may call."""
    names = set()
    for tool in body.get("tools") or []:
        name = str(tool.get("name")) if isinstance(tool, dict) else ""
        names.add("bash" if name == "Bash" else name.removeprefix("mcp__roost__"))
    return names


class FakeAnthropic(FakeModelServer):
    """The server, on 127.0.0.1 and a free port, in a thread of the test process."""

    name = "fake-anthropic"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def post(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        """``POST /v1/messages``, streamed."""
        if not handler.path.startswith("/v1/messages") or handler.path.startswith("/v1/messages/count_tokens"):
            send_json(handler, 404, {"type": "error", "error": {"type": "not_found_error", "message": handler.path}})
            return
        chat: list[dict[str, Any]] = []

        def compute() -> dict[str, Any]:
            chat.extend(to_chat(body.get("messages") or []))
            return answer(self.scenario, {"model": body.get("model", ""), "messages": chat}, scenario_tools(body))

        reply = self.reply(compute)
        usage = usage_of(body, reply) if "error" not in reply else None
        self.log(body, reply, apiKey=handler.headers.get("x-api-key"), raw=body.get("messages"), messages=chat,
                 tools=[tool.get("name") for tool in body.get("tools") or []], usage=usage)
        self.wait_if_held(reply)
        if "error" in reply:
            send_json(handler, 400, {"type": "error", "error": {"type": "invalid_request_error", "message": reply["error"]}})
            return
        events = sse_events(str(body.get("model", "fake")), reply, usage_of(body, reply))
        send_stream(handler, [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events])


def usage_of(body: dict[str, Any], reply: dict[str, Any]) -> dict[str, int]:
    """The tokens an answer reports, as the real API counts them (about 4 characters a
    token): the whole request in (system prompt, tools, messages), the answer out."""
    request = json.dumps([body.get("system"), body.get("tools"), body.get("messages")])
    answer = (reply.get("text") or "") + (json.dumps(reply["tool"]) if reply.get("tool") else "")
    return {"input_tokens": max(1, len(request) // 4), "output_tokens": max(1, len(answer) // 4)}


def sse_events(model: str, reply: dict[str, Any], tokens: dict[str, int] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The SSE events of one answer. Usage as the real API reports it: ``message_start``
    has the input (and the cache counts) and 1 output token, ``message_delta`` the final
    output count."""
    tokens = tokens or {"input_tokens": 10, "output_tokens": 5}
    usage = {"input_tokens": tokens["input_tokens"], "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {"id": "msg_" + uuid.uuid4().hex[:12], "type": "message", "role": "assistant", "model": model, "content": [],
                            "stop_reason": None, "stop_sequence": None, "usage": usage},
            },
        )
    ]
    index = 0
    if reply.get("text"):
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}))
        events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": reply["text"]}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    stop = "end_turn"
    if reply.get("tool"):
        name, args = claude_tool(*reply["tool"])
        block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:16], "name": name, "input": {}}
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": block}))
        events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        stop = "tool_use"
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": tokens["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events
