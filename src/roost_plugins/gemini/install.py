"""``roost gemini install | uninstall``: put roost into the user's own Gemini CLI.

``install`` adds, and ``uninstall`` removes, exactly these entries of
``~/.gemini/settings.json`` (``$GEMINI_CLI_HOME/.gemini`` when that is set), leaving every
other setting, MCP server and hook as it was:

- the MCP server ``roost`` (``roost mcp``), trusted (Gemini CLI leaves an untrusted
  server's tools out of a headless run) and with ``ROOST_MCP_HOST=gemini`` in its
  environment, so it answers the hooks below and reads the session's files as this host
  does;
- the hooks ``AfterTool`` (matcher ``.*``) and ``AfterAgent``: ``roost gemini hook EVENT``.

Installing twice changes nothing; an older roost's hooks are replaced, not doubled. A
broken file is a :class:`~roost_core.settingsfile.SettingsFileError` and nothing is
written (:mod:`roost_core.settingsfile`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roost_core.claude.install import roost_command
from roost_core.mcp.server import HOST_ENV
from roost_core.settingsfile import (
    SettingsFileError,
    object_at,
    read_object,
    without_hooks,
    write_all,
)
from roost_plugins.gemini import EVENTS, SERVER_NAME, gemini_dir


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    return gemini_dir(env) / "settings.json"


def hook_command(event: str) -> str:
    return shlex.join([*roost_command(), "gemini", "hook", event])


def is_roost_hook(command: Any) -> bool:
    """Ours: ``... gemini hook EVENT`` run by a roost (this or another install)."""
    if not isinstance(command, str):
        return False
    try:
        parts = shlex.split(command)
    except ValueError:
        return False
    if len(parts) < 4 or parts[-3:-1] != ["gemini", "hook"] or parts[-1] not in EVENTS:
        return False
    runner = parts[:-3]
    return Path(runner[0]).name == "roost" or "roost_core.cli" in runner or "roost_plugins.gemini" in runner


def without_roost_hooks(hooks: dict[str, Any]) -> dict[str, Any]:
    """``hooks`` with every roost command taken out (and groups left empty dropped)."""
    return without_hooks(hooks, is_roost_hook)


def server_config() -> dict[str, Any]:
    command = roost_command()
    return {"command": command[0], "args": [*command[1:], "mcp"], "env": {HOST_ENV: "gemini"}, "trust": True}


def install(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Add roost's server and hooks (see the module); what was written."""
    path = settings_path(env)
    settings = read_object(path)
    hooks = without_roost_hooks(object_at(path, settings, "hooks"))
    for event in EVENTS:
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": hook_command(event)}]}
        if event == "AfterTool":
            group = {"matcher": ".*", **group}
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise SettingsFileError(path, f'"hooks.{event}" is not a list')
        groups.append(group)
    servers = {**object_at(path, settings, "mcpServers"), SERVER_NAME: server_config()}
    new_settings = {**settings, "hooks": hooks, "mcpServers": servers}
    changed = new_settings != settings
    if changed:
        write_all([(path, new_settings)])
    return {"settings": str(path), "server": server_config(), "changed": changed}


def uninstall(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Take out what :func:`install` added, and nothing else."""
    path = settings_path(env)
    settings = read_object(path)
    new_settings = dict(settings)
    hooks = settings.get("hooks")
    if isinstance(hooks, dict):
        kept = without_roost_hooks(hooks)
        if kept:
            new_settings["hooks"] = kept
        else:
            new_settings.pop("hooks")
    servers = settings.get("mcpServers")
    if isinstance(servers, dict) and SERVER_NAME in servers:
        rest = {name: value for name, value in servers.items() if name != SERVER_NAME}
        if rest:
            new_settings["mcpServers"] = rest
        else:
            new_settings.pop("mcpServers")
    changed = new_settings != settings
    if changed:
        write_all([(path, new_settings)])
    return {"settings": str(path), "changed": changed}
