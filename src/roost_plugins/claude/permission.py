"""Claude Code's permission prompts in a background job, as roost dialogs.

A job's Claude Code runs with ``--permission-prompt-tool mcp__roost__roost_permission``:
a tool call that needs a person's approval calls that MCP tool with ``{tool_name, input,
tool_use_id}`` and waits for its result, a single text holding JSON, ``{"behavior":
"allow", "updatedInput": {...}}`` or ``{"behavior": "deny", "message": "..."}`` (checked
against the pinned Claude Code, which refuses any other shape). roost turns the call into
a dialog with the options ``allow`` and ``deny``; the user answers it (``roost answer JOB
allow``), never an agent.
"""

from __future__ import annotations

import json
from typing import Any

from roost_core.dialogs import PERMISSION_OPTIONS, choice_of
from roost_plugins.claude import PERMISSION_TOOL

#: The longest part of a tool's input a dialog shows.
INPUT_CHARS = 1000
#: The tool as ``roost mcp`` lists it to a job's Claude Code (only when prompts are asked).
TOOL = {
    "name": PERMISSION_TOOL,
    # roost mcp calls the worker's ``permission`` op for it, on a connection of its own.
    "bridgeOp": "permission",
    "description": "roost: asks the user to allow or deny a tool call (Claude Code's permission prompt tool). Not for the model.",
    "parameters": {
        "type": "object",
        "properties": {"tool_name": {"type": "string"}, "input": {"type": "object"}, "tool_use_id": {"type": "string"}},
        "required": ["tool_name", "input"],
    },
}
#: What Claude Code's model reads when the user denies.
DENIED = "The user denied this tool call (roost answer). Do not try it again in another way; say what you needed it for."


def question(tool_name: str, tool_input: Any) -> str:
    """The dialog's text: which tool, and what it would do (a command, a file, else its
    input as JSON), cut to :data:`INPUT_CHARS`."""
    what: Any = tool_input
    if isinstance(tool_input, dict):
        for key in ("command", "file_path", "path", "url", "pattern"):
            if isinstance(tool_input.get(key), str):
                what = tool_input[key]
                break
    text = what if isinstance(what, str) else json.dumps(what, ensure_ascii=False, sort_keys=True)
    if len(text) > INPUT_CHARS:
        text = text[: INPUT_CHARS - 1] + "…"
    return f"Claude Code asks to use {tool_name}: {text}"


def decision(answer: str, tool_input: Any) -> dict[str, Any]:
    """The permission tool's result for the user's answer: allow only for ``allow`` (the
    input unchanged), deny for anything else."""
    if choice_of(answer, PERMISSION_OPTIONS) == "allow":
        return {"behavior": "allow", "updatedInput": tool_input if isinstance(tool_input, dict) else {}}
    return {"behavior": "deny", "message": DENIED}
