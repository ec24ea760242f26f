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

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roost_core.claude import BRIDGE_ENV, marker
from roost_core.envelope_rules import one_notice

#: The events ``roost claude install`` registers.
EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop")
#: How long the command waits for the roost side (it answers at once; Claude Code's own
#: hook timeout is longer).
REQUEST_TIMEOUT = 20.0


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


def bridge_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The socket of the roost side of this session, if there is one."""
    env = os.environ if env is None else env
    if env.get(BRIDGE_ENV):
        return Path(env[BRIDGE_ENV])
    from roost_core.claude.bridge import foreground_socket
    from roost_core.paths import resolve_paths

    home = resolve_paths(env).home
    candidates: list[int] = []
    if env.get("CLAUDE_PID", "").isdigit():
        candidates.append(int(env["CLAUDE_PID"]))
    try:
        import psutil

        candidates.extend(parent.pid for parent in psutil.Process().parents())
    except Exception:  # noqa: BLE001 - no parents to look at
        pass
    for pid in dict.fromkeys(candidates):
        path = foreground_socket(home, pid)
        if path.exists():
            return path
    return None


def main(event: str, stdin: Any = None, stdout: Any = None) -> int:
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    try:
        data = json.loads(stdin.read() or "{}")
    except ValueError:
        return 0
    if not isinstance(data, dict):
        return 0
    try:
        path = bridge_path()
        if path is None:
            return 0
        from roost_core.claude.bridge import request

        result = request(path, "hook", event=event, input=data, timeout=REQUEST_TIMEOUT)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"roost: hook {event}: {exc}", file=sys.stderr)
        return 0
    output = result.get("output")
    if output:
        stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
        stdout.flush()
    return 0
