"""roost for OpenCode (``opencode-ai``, pinned 1.18.33 in tests/opencode): both of its sides
in one package (see ``docs/hosts.md``, "OpenCode").

- ``host``: the background host (``--host opencode``): a worker runs ``opencode serve`` on
  127.0.0.1 with a password of its own and drives one OpenCode session over its HTTP API
  and event stream.
- ``transcript``: the job's session file (roost's JSONL, naming the OpenCode session) and
  what OpenCode's own store (SQLite) says roost items reached.
- ``roost_plugin.js``: the OpenCode plugin that hands agent items over mid-turn.
- ``install``: ``roost opencode install | uninstall``: the MCP server ``roost`` in the
  user's own OpenCode config.
"""

from __future__ import annotations

from pathlib import Path

from roost_core.agentenv import find_program

#: The OpenCode versions roost's tests ran (tests/opencode/package-lock.json); a job on
#: another version says so once (:attr:`roost_core.hosts.process.ProcessHost.tested_versions`).
TESTED_VERSIONS = ("1.18.33",)

#: The plugin file OpenCode loads (``"plugin": ["file://..."]``).
PLUGIN_FILE = Path(__file__).resolve().parent / "roost_plugin.js"
#: The variable that points the plugin at a job's worker.
PLUGIN_BRIDGE_ENV = "ROOST_OPENCODE_BRIDGE"
#: The MCP server's name in OpenCode's config: its tools are ``roost_roost_send``...
SERVER_NAME = "roost"


class OpenCodeError(RuntimeError):
    """OpenCode could not be started or did not behave as expected."""


def opencode_binary() -> str:
    """``$ROOST_OPENCODE_BIN``, else ``opencode`` on PATH."""
    return find_program("ROOST_OPENCODE_BIN", "opencode", "OpenCode", OpenCodeError)
