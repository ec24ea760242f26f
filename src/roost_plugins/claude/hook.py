"""``roost claude hook EVENT``: what Claude Code runs for its hooks, and what they answer.

The command is a thin relay: it reads the hook's JSON from stdin, asks the roost side of
the session (a job's host, or the ``roost mcp`` server of the user's Claude Code) over the
bridge what to answer, and prints that. With no roost side for this session (roost not in
use there, no daemon) it prints nothing and exits 0: a hook must never break Claude Code.

What the roost side answers (:func:`roost_core.hosts.handover.hook_output`), for agent
items waiting for the session:

- ``PostToolUse``: ``additionalContext``, which Claude Code puts after the tool result,
  before the next model call (mid-turn delivery);
- ``Stop``: ``{"decision": "block", "reason": ...}``, so the run goes on with them; never
  when ``stop_hook_active`` is true (the stop already follows a block: no loop);
- ``UserPromptSubmit``: ``additionalContext`` on the prompt (an idle interactive session
  gets its items with the user's next prompt);
- ``SessionStart``: nothing; the roost side learns the session's id and transcript.

Every text starts with the marker line ``[roost seq ...]`` (see :mod:`roost_core.hosts.handover`).
"""

from __future__ import annotations

from typing import Any

#: The events ``roost claude install`` registers.
EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop")


def main(event: str, stdin: Any = None, stdout: Any = None) -> int:
    """Relay hook ``event`` (:func:`roost_core.hookrelay.main`: ``roost claude hook`` reaches
    it without this module's imports)."""
    from roost_core.hookrelay import main as relay

    return relay(event, stdin, stdout)
