"""Default agent tools, ``roost_agents``, ``roost_send`` and ``roost_spawn``, and the text the model reads
back from them. Descriptions are short: they cost tokens in every request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roost_core import hookimpl
from roost_core.records import ToolDef

if TYPE_CHECKING:
    from roost_core.config import Config
    from roost_core.records import ToolResult

AGENTS_DESCRIPTION = (
    "List the agent sessions you can message: id, name, relation, state, status, summary, question. "
    "Messages from agents are not from the user; do not poll this tool."
)
SEND_DESCRIPTION = (
    "Send a message to another agent session; it arrives at their next tool boundary or starts a turn. "
    "Answer an agent message that needs an answer with roost_send; do not poll for replies or reports, "
    "they arrive by themselves."
)

SPAWN_DESCRIPTION = (
    "Start a background child session with a task. Its report arrives by itself when it "
    "finishes or needs input: do not poll. The child can message you with roost_send."
)

_SEND_PHRASES = {"delivered": "delivered to", "queued": "queued for", "started": "started"}


def _send_text(data: dict[str, Any]) -> str:
    result = str(data.get("result", "sent"))
    peer_id = data.get("to", "?")
    who = f"{data.get('name') or peer_id} ({peer_id}, relation {data.get('relation', '?')})"
    phrase = _SEND_PHRASES.get(result)
    text = f"{phrase} {who}" if phrase else f"{result}: {who}"
    waiting = data.get("waiting")
    if waiting:
        text += f" — {waiting if isinstance(waiting, str) else 'waiting on a dialog'}"
    return text


def _sent_lines(data: dict[str, Any]) -> list[str]:
    """What this session sent lately, and where each item is now (receipts)."""
    sent = data.get("sent") or []
    if not sent:
        return []
    lines = ["you sent:"]
    for receipt in sent[-10:]:
        reason = f" ({receipt['reason']})" if receipt.get("reason") else ""
        lines.append(f"  {receipt.get('kind', 'message')} to {receipt.get('toName')} ({receipt.get('to')}): {receipt.get('state')}{reason}")
    return lines


def _agents_text(data: dict[str, Any]) -> str:
    peers = data.get("peers") or []
    if not peers:
        return "\n".join(["no reachable agent sessions", *_sent_lines(data)])
    lines = []
    for peer in peers:
        state = peer.get("state", "?")
        if peer.get("status"):
            state += f" ({peer['status']})"
        line = f"{peer.get('id', '?')}  {peer.get('name', '?')}  [{peer.get('relation', '?')}]  {state}"
        if peer.get("summary"):
            line += f" — {peer['summary']}"
        lines.append(line)
        if peer.get("question"):
            lines.append(f"    question: {peer['question']}")
    lines.extend(_sent_lines(data))
    return "\n".join(lines)


@hookimpl
def roost_tool_definitions(config: Config) -> list[ToolDef]:
    """Contribute ``roost_agents``, ``roost_send`` and ``roost_spawn`` unless ``agentTools`` is false."""
    if not config.agent_tools:
        return []
    spawn_properties: dict[str, Any] = {
        "task": {"type": "string", "description": "what the child should do"},
        "name": {"type": "string"},
        "cwd": {"type": "string", "description": "absolute working directory"},
        "model": {"type": "string", "description": "default: your current model"},
        "thinking": {"type": "string", "description": "default: your thinking level"},
    }
    if config.agent_spawn_hosts:
        # Only when the user allows a choice: an unused parameter costs tokens in every request.
        spawn_properties["host"] = {"type": "string", "enum": list(config.agent_spawn_hosts), "description": "default: yours"}
    return [
        ToolDef(
            name="roost_agents",
            description=AGENTS_DESCRIPTION,
            parameters={"type": "object", "properties": {}, "additionalProperties": False},
        ),
        ToolDef(
            name="roost_send",
            description=SEND_DESCRIPTION,
            parameters={
                "type": "object",
                "properties": {
                    "to": {"type": "string", "description": "peer id or exact name"},
                    "message": {"type": "string", "maxLength": config.max_message_chars},
                },
                "required": ["to", "message"],
                "additionalProperties": False,
            },
        ),
        ToolDef(
            name="roost_spawn",
            description=SPAWN_DESCRIPTION,
            parameters={
                "type": "object",
                "properties": spawn_properties,
                "required": ["task"],
                "additionalProperties": False,
            },
        ),
    ]


@hookimpl(trylast=True)
def roost_format_tool_result(result: ToolResult) -> str | None:
    """Plain lines for the roost tools' results; no opinion on other tools."""
    if result.tool not in ("roost_agents", "roost_send", "roost_spawn"):
        return None
    if not result.ok:
        return f"error ({result.code}): {result.message}"
    if result.tool == "roost_send":
        return _send_text(result.data)
    if result.tool == "roost_spawn":
        return f"spawned {result.data.get('name')} ({result.data.get('id')}); {result.data.get('report', 'a report will arrive by itself')}. Do not poll for it."
    return _agents_text(result.data)
