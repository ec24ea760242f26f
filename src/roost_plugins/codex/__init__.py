"""roost for Codex (``@openai/codex``): both of its sides in one package (docs/hosts.md).

- ``host``: the background host (``--host codex``): a worker runs ``codex exec --json``
  for a run and ``codex exec resume --json THREAD`` for each later one, with roost's MCP
  server and hooks given on the command line.
- ``transcript``: a Codex session file (a "rollout"), which queue seqs it holds and how
  ``roost log`` shows it.
- ``install``: ``roost codex install | uninstall``: the MCP server and the hooks in the
  user's own Codex (``$CODEX_HOME``).

Codex's hooks have the same answers as Claude Code's (``additionalContext``, a blocked
``Stop``), so the hook command and the bridge are Claude Code's (:mod:`roost_core.claude`);
every text roost hands over starts with the ``[roost seq ...]`` marker line.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

#: The roost MCP server's name in Codex (its tools are the namespace ``mcp__roost``).
SERVER_NAME = "roost"
#: The hooks roost uses: turn start (learns the rollout), after each tool (mid-turn
#: delivery) and the turn's end (a blocked stop goes on with the items).
EVENTS = ("UserPromptSubmit", "PostToolUse", "Stop")


class CodexError(RuntimeError):
    """Codex could not be started or did not behave as expected."""


def codex_binary() -> str:
    """The Codex CLI: ``$ROOST_CODEX_BIN``, else ``codex`` on PATH."""
    configured = os.environ.get("ROOST_CODEX_BIN")
    if configured:
        return configured
    found = shutil.which("codex")
    if not found:
        raise CodexError("Codex is not installed: put `codex` on PATH or set ROOST_CODEX_BIN")
    return found


def codex_home(env: Mapping[str, str] | None = None) -> Path:
    """Codex's own folder: ``$CODEX_HOME``, else ``~/.codex``."""
    env = os.environ if env is None else env
    configured = env.get("CODEX_HOME")
    if configured:
        return Path(configured).expanduser()
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".codex"
