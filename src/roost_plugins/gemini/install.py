"""``roost gemini install | uninstall``: put roost into the user's own Gemini CLI.

``install`` adds, and ``uninstall`` removes, exactly these entries of
``~/.gemini/settings.json`` (``$GEMINI_CLI_HOME/.gemini`` when that is set), leaving every
other setting, MCP server and hook as it was:

- the MCP server ``roost`` (``roost mcp``), trusted (Gemini CLI leaves an untrusted
  server's tools out of a headless run) and with ``ROOST_MCP_HOST=gemini`` in its
  environment, so it answers the hooks below and reads the session's files as this host
  does;
- the hooks ``BeforeAgent``, ``AfterTool`` (matcher ``.*``) and ``AfterAgent``:
  ``roost gemini hook EVENT``.

Installing twice changes nothing; an older roost's hooks are replaced, not doubled. A
broken file is a :class:`~roost_core.settingsfile.SettingsFileError` and nothing is
written (:mod:`roost_core.settingsfile`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roost_core import installcommand
from roost_core.installcommand import roost_command
from roost_core.installrecord import Found, forget, remember
from roost_core.mcp.server import HOST_ENV
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
from roost_plugins.gemini import EVENTS, SERVER_NAME, gemini_dir


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    """Gemini CLI's user settings file."""
    return gemini_dir(env) / "settings.json"


def hook_command(event: str) -> str:
    """The command Gemini CLI runs for ``event``: ``roost gemini hook EVENT``."""
    return installcommand.hook_command("gemini", event)


def is_roost_hook(command: Any) -> bool:
    """Ours: ``... gemini hook EVENT`` run by a roost (this or another install)."""
    return installcommand.is_roost_hook(command, "gemini", events=EVENTS, runners=("roost_core.cli", "roost_plugins.gemini"))


def without_roost_hooks(hooks: dict[str, Any]) -> dict[str, Any]:
    """``hooks`` with every roost command taken out (and groups left empty dropped)."""
    return without_hooks(hooks, is_roost_hook)


def server_config() -> dict[str, Any]:
    command = roost_command()
    return {"command": command[0], "args": [*command[1:], "mcp"], "env": {HOST_ENV: "gemini"}, "trust": True}


def without_roost(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with roost's server and hooks taken out, and nothing else."""
    return settings_without_server(settings_without_hooks(settings, is_roost_hook), SERVER_NAME)


def install(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Add roost's server and hooks (see the module); what was written. What the file
    was is kept for uninstall (:mod:`roost_core.installrecord`)."""
    path = settings_path(env)
    found = Found(path)
    settings = read_object(path)
    hooks = without_roost_hooks(object_at(path, settings, "hooks"))
    add_hooks(path, hooks, EVENTS, lambda event: {"type": "command", "command": hook_command(event)}, tool_matcher=".*", tool_event="AfterTool")
    servers = {**object_at(path, settings, "mcpServers"), SERVER_NAME: server_config()}
    new_settings = {**settings, "hooks": hooks, "mcpServers": servers}
    changed = new_settings != settings
    if changed:
        write_all([(path, new_settings)])
    remember(found, clean=without_roost(settings) == settings, env=env)
    return {"settings": str(path), "server": server_config(), "changed": changed}


def uninstall(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Take out what :func:`install` added, and nothing else: the file as install found
    it when it is as install left it (no file where there was none)."""
    path = settings_path(env)
    settings = read_object(path)
    changes = uninstall_change(path, settings, without_roost(settings), env)
    write_all(changes)
    forget(path, env)
    return {"settings": str(path), "changed": bool(changes)}
