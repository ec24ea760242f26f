"""Default transcript rendering for people (``roost log``, the view): one short block per
session-file entry, agent messages as a framed ``✉`` block."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from roost_core import hookimpl
from roost_core.transcript import AGENT_MESSAGE_TYPE

if TYPE_CHECKING:
    from roost_core.records import TranscriptEntry

TOOL_RESULT_CHARS = 200

# Plugins never import each other, so the envelope's shape is matched here on its own.
_ENVELOPE_BODY = re.compile(r"<agent-message\b[^>\n]*>\n(.*?)\n</agent-message>", re.DOTALL)


def render_header(details: dict[str, Any]) -> str:
    """The first line of an agent message block: ``✉ report from NAME (child)``, then the
    message id and, for a reply, the id it answers with the first words of that message
    (``· m1a2b3c4d ↪ re m0f0e0d0c “what is 2+2?”``), so the thread reads down the log."""
    kind = details.get("kind") or "message"
    sender = details.get("fromName") or details.get("from") or "agent"
    relation = details.get("relation")
    header = f"✉ {kind} from {sender}"
    if relation:
        header += f" ({relation})"
    if details.get("scope"):
        header += f" to *{details['scope']}"
    if details.get("id"):
        header += f" · {details['id']}"
    if details.get("replyTo"):
        header += f" ↪ re {details['replyTo']}"
        if details.get("replyQuote"):
            quote = " ".join(str(details["replyQuote"]).split())
            header += f" “{quote}”"
    return header


def _agent_message(entry: TranscriptEntry) -> str:
    match = _ENVELOPE_BODY.search(entry.text)
    body = match[1] if match else entry.text
    lines = [render_header(entry.details)]
    lines.extend(f"│ {line}" for line in body.split("\n"))
    lines.append("╰─")
    return "\n".join(lines)


def _assistant(entry: TranscriptEntry) -> str:
    message = entry.raw.get("message") or {}
    content = message.get("content")
    lines = [f"assistant: {entry.text}"] if entry.text else []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict) and part.get("type") == "toolCall":
            arguments = json.dumps(part.get("arguments") or {}, ensure_ascii=False, separators=(",", ":"))
            lines.append(f"⚙ {part.get('name', '?')}({arguments})")
    # A thinking-only message has no line to show; "" hides it.
    return "\n".join(lines)


def _tool_result(entry: TranscriptEntry) -> str:
    message = entry.raw.get("message") or {}
    prefix = "(error) " if message.get("isError") else ""
    return f"  ↳ {message.get('toolName', '?')}: {prefix}{entry.text[:TOOL_RESULT_CHARS].rstrip()}"


@hookimpl(trylast=True)
def roost_render_entry(entry: TranscriptEntry) -> str | None:
    """Render user, assistant, tool-result and agent-message entries; hide the header."""
    if entry.type == "session":
        return ""
    if entry.type == "custom_message":
        return _agent_message(entry) if entry.custom_type == AGENT_MESSAGE_TYPE else None
    if entry.type != "message":
        return None
    if entry.role == "user":
        return f"› you: {entry.text}"
    if entry.role == "assistant":
        return _assistant(entry)
    if entry.role == "toolResult":
        return _tool_result(entry)
    return None
