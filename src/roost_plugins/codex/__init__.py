"""roost for Codex (``@openai/codex``): both of its sides in one package (docs/hosts.md).

- ``host``: the background host (``--host codex``): a worker runs ``codex exec --json``
  for a run and ``codex exec resume --json THREAD`` for each later one, with roost's MCP
  server and hooks given on the command line.
- ``transcript``: a Codex session file (a "rollout"), which queue seqs it holds and how
  ``roost log`` shows it.
- ``install``: ``roost codex install | uninstall``: the MCP server and the hooks in the
  user's own Codex (``$CODEX_HOME``).

Codex's hooks have the same answers as Claude Code's (``additionalContext``, a blocked
``Stop``), so the hook relay, the bridge and the answers are the bridged hosts' shared ones
(:mod:`roost_core.hookrelay`, :mod:`roost_core.hosts.bridge`, :mod:`roost_core.hosts.handover`);
every text roost hands over starts with the ``[roost seq ...]`` marker line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from roost_core.agentenv import agent_home, find_program

#: The Codex CLI versions roost's tests ran (tests/codex/package-lock.json); a job on
#: another version says so once (:attr:`roost_core.hosts.process.ProcessHost.tested_versions`).
TESTED_VERSIONS = ("0.169.1",)

#: The roost MCP server's name in Codex (its tools are the namespace ``mcp__roost``).
SERVER_NAME = "roost"
#: The hooks roost uses: turn start (learns the rollout), after each tool (mid-turn
#: delivery) and the turn's end (a blocked stop goes on with the items).
EVENTS = ("UserPromptSubmit", "PostToolUse", "Stop")


class CodexError(RuntimeError):
    """Codex could not be started or did not behave as expected."""


def codex_binary() -> str:
    """The Codex CLI: ``$ROOST_CODEX_BIN``, else ``codex`` on PATH."""
    return find_program("ROOST_CODEX_BIN", "codex", "Codex", CodexError)


def codex_home(env: Mapping[str, str] | None = None) -> Path:
    """Codex's own folder: ``$CODEX_HOME``, else ``~/.codex``."""
    return agent_home(env, "CODEX_HOME", ".codex")
