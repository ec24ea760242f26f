"""``roost qwen install | uninstall``: put roost into the user's own Qwen Code.

``install`` adds, and ``uninstall`` removes, exactly two things in Qwen Code's user
settings (``~/.qwen/settings.json``, ``$QWEN_HOME/settings.json`` when that is set),
leaving every other setting as it was:

- the MCP server ``roost`` (``roost mcp --hooks --host qwen``, ``trust: true``: roost's
  tools are governed by roost's own reach rules and limits, so Qwen Code need not ask
  before each call);
- the hooks ``UserPromptSubmit``, ``PostToolUse`` and ``Stop`` (``roost qwen hook EVENT``),
  which ask that server for what waits for the session.

Installing twice changes nothing; an older roost's entries are replaced, not doubled. The
file is read and checked before it is written, through :mod:`roost_core.settingsfile`
(as ``roost claude install`` edits Claude Code's): a broken file is a
:class:`~roost_core.settingsfile.SettingsFileError` naming it, a symbolic link is written
through.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roost_core import installcommand
from roost_core.installcommand import roost_command
from roost_core.installrecord import Found, forget, remember
from roost_core.settingsfile import (
    add_hooks,
    object_at,
    read_object,
    settings_without_hooks,
    settings_without_server,
    uninstall_change,
    without_hooks,
    write_all,
)
from roost_plugins.qwen import EVENTS, SERVER_NAME, qwen_home


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    """Qwen Code's user settings file."""
    return qwen_home(env) / "settings.json"


def hook_command(event: str) -> str:
    """The command Qwen Code runs for ``event``: ``roost qwen hook EVENT``."""
    return installcommand.hook_command("qwen", event)


def server_entry() -> dict[str, Any]:
    command = roost_command()
    return {"command": command[0], "args": [*command[1:], "mcp", "--hooks", "--host", "qwen"], "trust": True}


def is_roost_hook(command: Any) -> bool:
    """Ours: ``... qwen hook EVENT`` run by a roost (this or another install)."""
    return installcommand.is_roost_hook(command, "qwen")


def without_roost(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with roost's server and hooks taken out, and nothing else."""
    return settings_without_server(settings_without_hooks(settings, is_roost_hook), SERVER_NAME)


def install(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Add roost's server and hooks (see the module docstring); what the file was is kept
    for uninstall (:mod:`roost_core.installrecord`)."""
    path = settings_path(env)
    found = Found(path)
    settings = read_object(path)
    hooks = without_hooks(object_at(path, settings, "hooks"), is_roost_hook)
    add_hooks(path, hooks, EVENTS, lambda event: {"type": "command", "command": hook_command(event)}, tool_matcher=".*")
    servers = {**object_at(path, settings, "mcpServers"), SERVER_NAME: server_entry()}
    new_settings = {**settings, "hooks": hooks, "mcpServers": servers}
    changed = new_settings != settings
    write_all([(path, new_settings)] if changed else [])
    remember(found, clean=without_roost(settings) == settings, env=env)
    return {"settings": str(path), "server": servers[SERVER_NAME], "changed": changed}


def uninstall(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Take out what :func:`install` added, nothing else: the file as install found it
    when it is as install left it (no file where there was none)."""
    path = settings_path(env)
    settings = read_object(path)
    changes = uninstall_change(path, settings, without_roost(settings), env)
    write_all(changes)
    forget(path, env)
    return {"settings": str(path), "changed": bool(changes)}
