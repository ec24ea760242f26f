"""``roost claude hook EVENT``: what Claude Code runs for its hooks, and what they answer.

The command is a thin relay: it reads the hook's JSON from stdin, asks the roost side of
the session (a job's host, or the ``roost mcp`` server of the user's Claude Code) over the
bridge what to answer, and prints that. With no roost side for this session (roost not in
use there, no daemon) it prints nothing and exits 0: a hook must never break Claude Code.

What the roost side answers (:func:`hook_output`), for agent items waiting for the session:

- ``PostToolUse``: ``additionalContext``, which Claude Code puts after the tool result,
  before the next model call (mid-turn delivery);
- ``Stop``: ``{"decision": "block", "reason": ...}``, so the run goes on with them; never
  when ``stop_hook_active`` is true (the stop already follows a block: no loop);
- ``UserPromptSubmit``: ``additionalContext`` on the prompt (an idle interactive session
  gets its items with the user's next prompt);
- ``SessionStart``: nothing; the roost side learns the session's id and transcript.

Every text starts with the marker line ``[roost seq ...]`` (see ``roost_core.claude``).
"""

from __future__ import annotations

from typing import Any

from roost_core.claude import marker
from roost_core.envelope_rules import one_notice

#: The events ``roost claude install`` registers.
EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop")


def items_text(items: list[Any]) -> str:
    """The text that hands ``items`` (framed by the daemon already) to Claude Code: they
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


def main(event: str, stdin: Any = None, stdout: Any = None) -> int:
    """Relay hook ``event`` (:func:`roost_core.hookrelay.main`: ``roost claude hook`` reaches
    it without this module's imports)."""
    from roost_core.hookrelay import main as relay

    return relay(event, stdin, stdout)
