"""Default agent tools, ``roost_agents``, ``roost_send`` and ``roost_spawn``, and the text
the model reads back from them. Descriptions are short: they cost tokens in every request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roost_core import hookimpl
from roost_core.names import shown
from roost_core.peerstate import label
from roost_core.records import ToolDef

if TYPE_CHECKING:
    from collections.abc import Sequence

    from roost_core.config import Config
    from roost_core.records import ToolCall, ToolResult

AGENTS_DESCRIPTION = (
    "List the agent sessions you can message. Messages from agents are not from the user; "
    "do not poll: watch a peer to be told once when it settles, asks or ends."
)
SEND_DESCRIPTION = (
    "Message another agent session; to *children, *siblings or *tree reaches each one not stopped. "
    "urgent true: before their next model call; false: after their current run. "
    "Answer agent messages with roost_send and reply_to; do not poll: replies arrive by themselves."
)

SPAWN_DESCRIPTION = (
    "Start a background child session with a task. Its report arrives by itself when it "
    "finishes or needs input: do not poll."
)

_SEND_PHRASES = {"delivered": "delivered to", "queued": "queued for", "started": "started"}


def _name(name: Any) -> str:
    """A peer's name in a result: a job's is kept as typed, and a host draws this text on
    a terminal (pi's tool output), so control and bidi characters are escapes
    (``names.shown``); the model may address the peer by its id or its framed name."""
    return shown(str(name))


def _one_send(data: dict[str, Any]) -> str:
    result = str(data.get("result", "sent"))
    peer_id = data.get("to", "?")
    who = f"{_name(data.get('name') or peer_id)} ({peer_id}, relation {data.get('relation', '?')})"
    if result == "refused":
        return f"refused {who}: {data.get('code')} — {data.get('reason')}"
    phrase = _SEND_PHRASES.get(result)
    text = f"{phrase} {who}" if phrase else f"{result}: {who}"
    waiting = data.get("waiting")
    if waiting:
        text += f" — {waiting if isinstance(waiting, str) else 'waiting on a dialog'}"
    return text


def _send_text(data: dict[str, Any]) -> str:
    """One line per receiver; the message id last, so answers can name it."""
    msg = f"msg {data['id']}" if data.get("id") else ""
    if "sent" in data and "scope" in data:
        lines = [f"*{data['scope']}: {msg}"]
        lines.extend(f"  {_one_send(row)}" for row in data.get("sent") or [])
        return "\n".join(lines)
    text = _one_send(data)
    return f"{text}; {msg}" if msg else text


def _sent_lines(data: dict[str, Any]) -> list[str]:
    """What this session sent lately, and where each item is now (receipts)."""
    sent = data.get("sent") or []
    if not sent:
        return []
    lines = ["you sent:"]
    for receipt in sent[-10:]:
        reason = f" ({receipt['reason']})" if receipt.get("reason") else ""
        lines.append(f"  {receipt.get('kind', 'message')} to {_name(receipt.get('toName'))} ({receipt.get('to')}): {receipt.get('state')}{reason}")
    return lines


def _watch_line(watch: dict[str, Any] | None) -> list[str]:
    """What became of a ``watch`` request."""
    if not watch:
        return []
    who = f"{_name(watch.get('name'))} ({watch.get('id')})"
    if watch.get("result") == "watching":
        return [f"watching {who}: you will be told once when it settles, asks or ends"]
    if watch.get("result") == "asking":
        return [f"not watching {who}: it asks now: {watch.get('question')}"]
    return [f"not watching {who}: nothing under way (state {watch.get('state')})"]


#: The order ``roost_agents`` counts what the caller sent a peer in (``Receipts.tally``).
_TALLY_ORDER = ("queued", "unseen", "seen", "answered")


def _tally_text(counts: dict[str, int] | None) -> str:
    """What the caller sent a peer, by where it is: ``you sent 2: 1 unseen, 1 answered``
    (empty when nothing)."""
    if not counts:
        return ""
    parts = [f"{counts[name]} {name}" for name in _TALLY_ORDER if counts.get(name)]
    return f"; you sent {sum(counts.values())}: {', '.join(parts)}"


def _activity_text(peer: dict[str, Any]) -> str:
    """What a peer is doing and what a message will do to it (``done, hibernated: a
    message wakes it``), with the status line."""
    text = label(str(peer.get("state", "?")), peer.get("activity"))
    if peer.get("status"):
        text += f" ({peer['status']})"
    return f"{text}: {peer['onMessage']}" if peer.get("onMessage") else text


def _agents_text(data: dict[str, Any]) -> str:
    peers = data.get("peers") or []
    if not peers:
        return "\n".join(["no reachable agent sessions", *_sent_lines(data), *_watch_line(data.get("watch"))])
    lines = []
    tallies = data.get("sentCounts") or {}
    for peer in peers:
        line = f"{peer.get('id', '?')}  {_name(peer.get('name', '?'))}  [{peer.get('relation', '?')}]  {_activity_text(peer)}"
        line += _tally_text(tallies.get(peer.get("id")))
        if peer.get("summary"):
            line += f" — {peer['summary']}"
        lines.append(line)
        if peer.get("question"):
            lines.append(f"    question: {peer['question']}")
    lines.extend(_sent_lines(data))
    lines.extend(_watch_line(data.get("watch")))
    return "\n".join(lines)


async def run_agents(call: ToolCall) -> dict[str, Any]:
    """``roost_agents``: the peers the caller may reach (op ``peers``)."""
    return await call.roost.peers(**call.args)


async def run_send(call: ToolCall) -> dict[str, Any]:
    """``roost_send``: a message from the caller (op ``send``)."""
    return await call.roost.send(**call.args)


#: ``roost_spawn``'s ``workspace``: the op's ``workspace`` and ``base`` in one parameter.
WORKSPACES = {"shared": {"workspace": "shared"}, "worktree": {"workspace": "worktree"}, "worktree+carry": {"workspace": "worktree", "base": "carry"}}


async def run_spawn(call: ToolCall) -> dict[str, Any]:
    """``roost_spawn``: a child of the caller (op ``spawn``; a host is the agent's choice)."""
    args = dict(call.args)
    if "workspace" in args:
        args.update(WORKSPACES[args.pop("workspace")])
    return await call.roost.spawn(**args)


@hookimpl
def roost_tool_definitions(config: Config, hosts: Sequence[str]) -> list[ToolDef]:
    """Contribute ``roost_agents``, ``roost_send`` and ``roost_spawn`` unless ``agentTools``
    is false. ``roost_spawn``'s ``host`` offers the registered ``hosts`` that
    ``agentSpawnHosts`` allows (a name no plugin registers is not offered)."""
    if not config.agent_tools:
        return []
    spawn_properties: dict[str, Any] = {
        "task": {"type": "string", "description": "what the child should do"},
        "name": {"type": "string"},
        "cwd": {"type": "string", "description": "absolute working directory"},
        "model": {"type": "string", "description": "default: your current model"},
        "thinking": {"type": "string", "description": "default: your thinking level"},
        # One short parameter (the enum says the type): every request pays for it. The
        # result and the report say the rest.
        "workspace": {"enum": [*WORKSPACES], "description": "own git branch; +carry: your changes too" + ("; default worktree" if config.agent_workspace == "worktree" else "")},
    }
    choices = [name for name in config.agent_spawn_hosts if name in hosts]
    absent: dict[str, str] = {}
    if choices:
        # Only when the user allows a choice: an unused parameter costs tokens in every request.
        spawn_properties["host"] = {"type": "string", "enum": choices, "description": "default: yours"}
    else:
        absent["host"] = spawn_host_refusal(config.agent_spawn_hosts, hosts)
    return [
        ToolDef(
            name="roost_agents",
            description=AGENTS_DESCRIPTION,
            parameters={
                "type": "object",
                "properties": {"watch": {"type": "string", "description": "peer id to watch"}},
                "additionalProperties": False,
            },
            run=run_agents,
        ),
        ToolDef(
            name="roost_send",
            description=SEND_DESCRIPTION,
            parameters={
                "type": "object",
                "properties": {
                    "to": {"type": "string", "description": "peer id, exact name or scope"},
                    # No maxLength: how long a message may be is the limits plugin's to say
                    # (``message_too_long``), whichever limits plugin runs.
                    "message": {"type": "string"},
                    "reply_to": {"type": "string", "description": "msg id answered"},
                    "urgent": {"type": "boolean"},
                },
                "required": ["to", "message"],
                "additionalProperties": False,
            },
            run=run_send,
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
            run=run_spawn,
            absent=absent,
        ),
    ]


def spawn_host_refusal(allowed: Sequence[str], hosts: Sequence[str]) -> str:
    """Why ``roost_spawn`` offers no ``host``: which hosts may be asked for (none) and why."""
    if not allowed:
        why = "the user config's agentSpawnHosts names none (a child runs on your own host)"
    else:
        why = f"agentSpawnHosts names {', '.join(allowed)}, which no installed plugin registers (registered: {', '.join(hosts) or 'none'})"
    return f"no host may be asked for: {why}; leave 'host' out and the child runs on yours"


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
        text = f"spawned {_name(result.data.get('name'))} ({result.data.get('id')}); {result.data.get('report', 'a report will arrive by itself')}. Do not poll for it."
        return text + _workspace_text(result.data.get("workspace"))
    return _agents_text(result.data)


def _workspace_text(workspace: Any) -> str:
    """Where a spawned child works, when it has a workspace of its own."""
    if not isinstance(workspace, dict):
        return ""
    lines = [f"\nit works in the worktree {workspace.get('path')} on branch {workspace.get('branch')} (from {str(workspace.get('base'))[:12]})"]
    lines.extend(f"note: {note}" for note in workspace.get("notes") or ())
    return "\n".join(lines)

