"""roost_peek: an agent tool that shows the last lines of a peer's transcript.

A tool plugin is one declaration: the :class:`~roost_core.records.ToolDef` names the tool,
describes it, gives its JSON-schema parameters (what every host shows the model, and what
the daemon checks a call against), and ``run``, the code the daemon runs for a call. The
call comes with the caller's authenticated identity (``call.caller``) and ``call.roost``,
what the daemon does for it as that caller: here ``transcript``, which refuses a peer the
caller may not reach (``unreachable``), whichever reach plugin decides that.
"""

from __future__ import annotations

from typing import Any

from roost_core import hookimpl
from roost_core.records import ToolCall, ToolDef, ToolResult

NAME = "roost_peek"
DEFAULT_LINES = 10
MAX_LINES = 50
#: Each line is cut here: a peek is a glance, not a copy of the peer's work.
LINE_CHARS = 300


async def peek(call: ToolCall) -> dict[str, Any]:
    """The last lines of ``peer``'s transcript, as ``[role] text``."""
    lines = call.args.get("lines") or DEFAULT_LINES
    entries = await call.roost.transcript(call.args["peer"], last=lines * 3)
    shown = [f"[{entry.role or entry.custom_type or entry.type}] {' '.join(entry.text.split())[:LINE_CHARS]}" for entry in entries if entry.text.strip()]
    return {"peer": call.args["peer"], "lines": shown[-lines:]}


@hookimpl
def roost_tool_definitions(config: Any) -> list[ToolDef]:
    """Contribute ``roost_peek`` (unless ``agentTools`` is false, as the default tools)."""
    if not config.agent_tools:
        return []
    return [
        ToolDef(
            name=NAME,
            description="Show the last lines of a peer's transcript (a peer you may reach).",
            parameters={
                "type": "object",
                "properties": {
                    "peer": {"type": "string", "description": "peer id or exact name"},
                    "lines": {"type": "integer", "minimum": 1, "maximum": MAX_LINES},
                },
                "required": ["peer"],
                "additionalProperties": False,
            },
            run=peek,
        )
    ]


@hookimpl
def roost_format_tool_result(result: ToolResult) -> str | None:
    """The peeked lines, one a line; no opinion on other tools."""
    if result.tool != NAME:
        return None
    if not result.ok:
        return f"error ({result.code}): {result.message}"
    lines = result.data.get("lines") or []
    return "\n".join([f"{result.data.get('peer')}: last {len(lines)} lines", *lines]) if lines else f"{result.data.get('peer')}: nothing yet"
