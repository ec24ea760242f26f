"""``roost gemini hook EVENT``: what Gemini CLI runs for its hooks, and what they answer.

The command is a thin relay, as ``roost claude hook`` is: it reads the hook's JSON from
stdin, asks the roost side of the session (a job's host over ``ROOST_BRIDGE``, or
the ``roost mcp`` server of the user's own Gemini CLI) what to answer, and prints that
JSON (``{}`` for nothing: Gemini CLI reads the hook's stdout as JSON). With no roost side
it prints ``{}`` and exits 0: a hook must never break Gemini CLI.

What the roost side answers (:func:`hook_output`), for items waiting for the session:

- ``AfterTool``: ``additionalContext``, which Gemini CLI appends to the tool's result as
  ``<hook_context>`` before the next model call (mid-turn delivery);
- ``AfterAgent``: ``{"decision": "deny", "reason": ...}``: the reason becomes a new user
  prompt and the model runs again in the same run; never when ``stop_hook_active`` is true
  (the turn already went on because of a denial: no loop);
- ``BeforeAgent`` (a user's own Gemini CLI only): nothing; the ``roost mcp`` server learns
  the session's id and file before the prompt's first model call, so the session joins
  under its own id with its first roost tool call.

Every text starts with the marker line ``[roost seq ...]``.
"""

from __future__ import annotations

import json
import sys

from roost_core import hookrelay

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def items_text(items: list[Any]) -> str:
    """The text that hands ``items`` (framed by the daemon already) to Gemini CLI."""
    from roost_core.hosts.handover import marker  # here: the hook's relay runs without it

    return marker([item.seq for item in items]) + "\n" + "\n\n".join(item.content for item in items)


def wants_items(event: str, data: dict[str, Any]) -> bool:
    """Whether this hook can hand items over."""
    if event == "AfterAgent":
        return not data.get("stop_hook_active")
    return event == "AfterTool"


def hook_output(event: str, items: list[Any]) -> dict[str, Any] | None:
    """The hook's answer that hands ``items`` over (None: nothing to say)."""
    if not items:
        return None
    text = items_text(items)
    if event == "AfterAgent":
        return {"decision": "deny", "reason": text}
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


#: Gemini CLI's hook events in Claude Code's names, as the ``roost mcp`` server answers
#: them: ``SessionStart`` only names the session (nothing is handed over there).
FOREGROUND_EVENTS = {"BeforeAgent": "SessionStart", "AfterTool": "PostToolUse", "AfterAgent": "Stop"}


def foreground_input(event: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A hook of the user's own Gemini CLI as the ``roost mcp`` server answers hooks (in
    Claude Code's names, :data:`FOREGROUND_EVENTS`), with the session's id and file (the
    server keys the peer on that file and reads it with this host's ``transcript_seqs``)."""
    kept = {key: data[key] for key in ("session_id", "transcript_path") if isinstance(data.get(key), str)}
    return FOREGROUND_EVENTS.get(event, "PostToolUse"), {**kept, "stop_hook_active": bool(data.get("stop_hook_active"))}


def from_foreground(event: str, output: Any) -> dict[str, Any] | None:
    """The server's answer (Claude Code's shape) as Gemini CLI reads it."""
    if not isinstance(output, dict):
        return None
    if output.get("decision") == "block":
        return {"decision": "deny", "reason": output.get("reason", "")}
    context = (output.get("hookSpecificOutput") or {}).get("additionalContext")
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}} if context else None


def main(event: str, stdin: Any = None, stdout: Any = None, *, bridge: str | None = None) -> int:
    """Relay one hook (see the module) to a job's ``bridge``, else to the ``roost mcp``
    server of the Gemini CLI that runs it; always exits 0. It imports what
    :mod:`roost_core.hookrelay` does and no more: ``roost gemini hook`` reaches it
    without the CLI (:mod:`roost_core.launch`)."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    output: Any = None
    data = hookrelay.read_input(stdin)
    if data is not None:
        try:
            if bridge:
                output = hookrelay.request(bridge, "hook", event=event, input=data, timeout=hookrelay.REQUEST_TIMEOUT).get("output")
            else:
                path = hookrelay.bridge_path()
                if path is not None:
                    asked, data = foreground_input(event, data)
                    answer = hookrelay.request(path, "hook", event=asked, input=data, timeout=hookrelay.REQUEST_TIMEOUT).get("output")
                    output = from_foreground(event, answer)
        except (OSError, RuntimeError, ValueError) as exc:
            print(f"roost: hook {event}: {exc}", file=sys.stderr)
    stdout.write(json.dumps(output or {}, ensure_ascii=False) + "\n")
    stdout.flush()
    return 0
