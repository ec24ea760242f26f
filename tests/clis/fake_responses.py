"""A fake OpenAI Responses API (``POST /v1/responses``, SSE) for the real Codex CLI.

Codex speaks only the Responses API (``wire_api = "responses"``; chat completions were
removed). Each request's ``input`` items are turned into the chat shape of
``tests/pi/fake_openai.py`` and answered by its scripted ``answer``:

- ``developer``/``system`` messages are the system prompt and hook contexts: dropped,
  unless they hold agent items (``<agent-message`` frames, roost's delivery through a
  hook), which then count as user inputs after the tool output they came with;
- user messages Codex adds itself (``<environment_context>``, ``<user_instructions>``,
  skills) are dropped; a ``Stop`` hook's ``<hook_prompt ...>R</hook_prompt>`` is the user
  input ``R``;
- ``function_call`` / ``function_call_output`` are tool calls and tool messages.

Tool names: MCP tools come as namespace tools (``{"type":"namespace","name":"mcp__S",
"tools":[{"name":"T"}]}``) and a scenario calls them by ``T``; ``bash`` is Codex's
``exec_command``. The call goes out with its namespace, as Codex requires.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from typing import Any

from clifake import CliFake, Wire
from fake_openai import answer, check_frames

_HOOK_PROMPT = re.compile(r"<hook_prompt[^>]*>(.*?)</hook_prompt>", re.DOTALL)
_MARKER = re.compile(r"\A\[roost seq(?: \d+)+\]\n")
_ENVELOPE = re.compile(r"<agent-message [^>\n]*>\n.*?\n</agent-message>", re.DOTALL)
#: User-role messages Codex writes itself (not the user's input).
_CODEX_OWN = ("<environment_context>", "<user_instructions>", "<skills", "# AGENTS.md", "<permissions")
USAGE = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110}


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))


def user_inputs(text: str) -> list[str]:
    """The inputs one user message holds, as a model would read them (roost's marker
    line ``[roost seq N]``, bookkeeping that names the items it hands over, is not one)."""
    hook = _HOOK_PROMPT.search(text)
    if hook:
        text = html.unescape(hook[1].strip())  # Codex escapes a Stop hook's reason
    text = _MARKER.sub("", text, count=1)
    if "<agent-message" in text:
        check_frames(text)
        return _ENVELOPE.findall(text)
    if hook:
        return [text]
    if text.lstrip().startswith(_CODEX_OWN):
        return []
    return [text] if text.strip() else []


def to_chat(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses ``input`` items as chat messages."""
    chat: list[dict[str, Any]] = []
    pending: list[str] = []  # agent items a hook gave between a call and its output
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            text = text_of(item.get("content"))
            if role in ("developer", "system"):
                if "<agent-message" in text:
                    check_frames(text)
                    pending.extend(_ENVELOPE.findall(text))
            elif role == "user":
                chat.extend({"role": "user", "content": piece} for piece in user_inputs(text))
            elif role == "assistant":
                chat.append({"role": "assistant", "content": text})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}}
            if chat and chat[-1]["role"] == "assistant" and "tool_calls" not in chat[-1]:
                chat[-1]["tool_calls"] = [call]
            else:
                chat.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            chat.append({"role": "tool", "tool_call_id": item.get("call_id"),
                         "content": output if isinstance(output, str) else json.dumps(output)})
            chat.extend({"role": "user", "content": piece} for piece in pending)
            pending = []
    chat.extend({"role": "user", "content": piece} for piece in pending)
    return chat


def offered_tools(body: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """Scenario tool name -> (Codex tool name, namespace) for the tools the request lists."""
    offered: dict[str, tuple[str, str | None]] = {}
    for tool in body.get("tools") or []:
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                offered[str(inner.get("name"))] = (str(inner.get("name")), str(tool.get("name")))
        elif tool.get("name"):
            name = str(tool["name"])
            offered["bash" if name == "exec_command" else name] = (name, None)
    return offered


class FakeResponses(CliFake):
    """The Responses API fake (Codex ``model_providers.X.base_url`` = :attr:`base_url`)."""

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def answer(self, path: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        if not path.startswith("/v1/responses"):
            return [], {"error": f"fake responses: no POST {path}"}
        chat = to_chat(body.get("input") or [])
        offered = offered_tools(body)
        reply = answer(self.scenario, {"model": body.get("model", ""), "messages": chat}, tools=set(offered))
        if reply.get("tool"):
            name, args = reply["tool"]
            if name == "bash":
                args = {"cmd": args.get("command", "")}
            codex_name, namespace = offered[name]
            reply = {**reply, "tool": (codex_name, args), "namespace": namespace}
        return chat, reply

    def render(self, path: str, body: dict[str, Any], reply: dict[str, Any]) -> Wire:
        self.wait_if_held(reply)
        if "error" in reply:
            return Wire(400, {"error": {"message": reply["error"], "type": "invalid_request_error"}})
        response_id = "resp_" + uuid.uuid4().hex[:16]
        response = {"id": response_id, "object": "response", "model": body.get("model"), "status": "in_progress", "output": []}
        events: list[tuple[str | None, Any]] = [("response.created", {"type": "response.created", "response": response})]
        output: list[dict[str, Any]] = []
        if reply.get("text"):
            message = {"type": "message", "id": "msg_" + uuid.uuid4().hex[:12], "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": reply["text"], "annotations": []}]}
            output.append(message)
        if reply.get("tool"):
            name, args = reply["tool"]
            call = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:12], "call_id": "call_" + uuid.uuid4().hex[:10],
                    "name": name, "arguments": json.dumps(args), "status": "completed"}
            if reply.get("namespace"):
                call["namespace"] = reply["namespace"]
            output.append(call)
        for index, item in enumerate(output):
            events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": index, "item": item}))
            if item["type"] == "message":
                events.append(("response.output_text.delta", {"type": "response.output_text.delta", "output_index": index,
                                                              "item_id": item["id"], "content_index": 0, "delta": reply["text"]}))
            events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": index, "item": item}))
        done = {**response, "status": "completed", "output": output, "usage": USAGE}
        events.append(("response.completed", {"type": "response.completed", "response": done}))
        return Wire(events=events)
