"""How roost hands agent items to an agent CLI that reaches it over a bridge, and reads
back which ones it took: what the bridged hosts share (:mod:`roost_core.hosts.bridged`).

Agent items never reach such an agent as user input: they arrive as hook context, as the
reason of a blocked stop, or as the result of ``roost_inbox``. Each such text starts with
a marker line, ``[roost seq 3 4]``, that names the queue seqs it carries, so the agent's
own transcript says what it has taken (:func:`handed_items` reads one back).

The hook answers here are the protocol several agent CLIs speak (an event's
``additionalContext``, a blocked stop's ``reason``); a host whose CLI answers otherwise
builds its own from :func:`marker`.
"""

from __future__ import annotations

import re
from typing import Any

from roost_core.envelope_rules import one_notice
from roost_core.hookrelay import BRIDGE_ENV as BRIDGE_ENV  # the hooks' and MCP server's variable
from roost_core.records import AGENT_MESSAGE_TYPE, TranscriptEntry

#: The first line of every text roost hands to an agent: which seqs it carries.
MARKER = re.compile(r"^\[roost seq((?: \d+)+)\]$")


def marker(seqs: list[int]) -> str:
    """The marker line that names ``seqs``."""
    return "[roost seq " + " ".join(str(seq) for seq in seqs) + "]"


def marked_seqs(text: str) -> list[int]:
    """The seqs named by a marker on the first line of ``text`` (none without one)."""
    first = text.split("\n", 1)[0].strip()
    match = MARKER.match(first)
    return [int(part) for part in match[1].split()] if match else []


def items_text(items: list[Any]) -> str:
    """The text that hands ``items`` (framed by the daemon already) to the agent: they
    reach its model together, so with the notice once, after the last
    (:func:`roost_core.envelope_rules.one_notice`)."""
    return marker([item.seq for item in items]) + "\n" + "\n\n".join(one_notice([item.content for item in items]))


def wants_items(event: str, data: dict[str, Any]) -> bool:
    """Whether this hook can hand agent items over."""
    if event == "Stop":
        return not data.get("stop_hook_active")
    return event in ("PostToolUse", "UserPromptSubmit")


def hook_output(event: str, items: list[Any]) -> dict[str, Any] | None:
    """The hook's answer that hands ``items`` over (None: nothing to say)."""
    if not items:
        return None
    text = items_text(items)
    if event == "Stop":
        return {"decision": "block", "reason": text}
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


_ENVELOPE = re.compile(
    r'<agent-message from="([^"<>]*)" id="([^"<>]*)" relation="([^"<>]*)" kind="([^"<>]*)"'
    r'(?: msg="([^"<>]*)")?(?: reply-to="([^"<>]*)")?>\n.*?\n</agent-message>',
    re.DOTALL,
)


def handed_items(text: str) -> list[TranscriptEntry]:
    """The agent items of one roost hand-over (marker line, then framed items), for
    people (``roost log``)."""
    seqs = marked_seqs(text)
    if not seqs:
        return []
    entries = []
    for index, match in enumerate(_ENVELOPE.finditer(text)):
        details = {"seq": seqs[index] if index < len(seqs) else None, "fromName": match[1], "from": match[2], "relation": match[3], "kind": match[4]}
        # The message's own id and the one it answers, as pi's entries carry them.
        details.update({key: value for key, value in (("id", match[5]), ("replyTo", match[6])) if value})
        entries.append(TranscriptEntry(type="custom_message", text=match[0], custom_type=AGENT_MESSAGE_TYPE, details=details, raw={}))
    return entries
