"""roost for Gemini CLI (``@google/gemini-cli``): both of its sides in one package (see
``docs/hosts.md``).

- ``host``: the background host (``--host gemini``): each run is one headless
  ``gemini -p TEXT --output-format stream-json`` on the job's Gemini session (``--session-id``
  the first time, ``--resume`` after), with roost's MCP server and hooks given in a
  settings file of the job's own (``GEMINI_CLI_SYSTEM_SETTINGS_PATH``).
- ``hook``: ``roost gemini hook EVENT``, the command Gemini CLI runs for its hooks: it hands
  over what waits for the session (mid-turn on ``AfterTool``, at the end of a turn on
  ``AfterAgent``); in a user's own Gemini CLI, ``BeforeAgent`` tells the ``roost mcp``
  server the session before its first roost tool call.
- ``install``: ``roost gemini install | uninstall``: the MCP server and the hooks in the
  user's ``~/.gemini/settings.json``.
- ``transcript``: where Gemini CLI keeps a session (one or more ``session-*.jsonl`` files)
  and which queue seqs it holds.

Every text roost hands to Gemini CLI starts with the marker line ``[roost seq 3 4]``
(:func:`roost_core.hosts.handover.marker`), so the transcript itself says what Gemini CLI took.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    # Annotations only: ``roost gemini hook`` imports this package on every hook.
    from collections.abc import Mapping
    from pathlib import Path

#: The MCP server's name: Gemini CLI calls its tools ``mcp_roost_<tool>``.
#: The Gemini CLI versions roost's tests ran (tests/gemini/package-lock.json); a job on
#: another version says so once (:attr:`roost_core.hosts.process.ProcessHost.tested_versions`).
TESTED_VERSIONS = ("0.61.0",)

SERVER_NAME = "roost"
#: The hook events ``roost gemini install`` registers: before each prompt's model calls
#: (the session is named before any roost tool call, so it is one agent from the first),
#: mid-turn, and at the end of a turn.
EVENTS = ("BeforeAgent", "AfterTool", "AfterAgent")
#: The hook events a background job's Gemini CLI runs: its worker knows the session from
#: the start, and a hook more would hold up each run's first request by one Python start.
JOB_EVENTS = ("AfterTool", "AfterAgent")


class GeminiError(RuntimeError):
    """Gemini CLI cannot run, or did something roost cannot follow."""


def gemini_binary() -> str:
    """The Gemini CLI to run: ``$ROOST_GEMINI_BIN``, else ``gemini`` on PATH."""
    import shutil

    configured = os.environ.get("ROOST_GEMINI_BIN")
    if configured:
        return configured
    found = shutil.which("gemini")
    if not found:
        raise GeminiError("Gemini CLI is not installed: no `gemini` on PATH and no ROOST_GEMINI_BIN")
    return found


def gemini_dir(env: Mapping[str, str] | None = None) -> Path:
    """Gemini CLI's own folder: ``$GEMINI_CLI_HOME/.gemini``, else ``~/.gemini``."""
    from pathlib import Path

    env = os.environ if env is None else env
    home = env.get("GEMINI_CLI_HOME") or env.get("HOME")
    return (Path(home) if home else Path.home()) / ".gemini"
