"""``roost claude install | uninstall``: put roost into the user's own Claude Code.

``install`` adds, and ``uninstall`` removes, exactly four things, leaving every other
setting as it was:

- the MCP server ``roost`` (``roost mcp``, ``alwaysLoad``) in the user-scope MCP servers,
  ``mcpServers`` of ``~/.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json`` when that is
  set), which Claude Code starts in every session;
- ``CLAUDE_CODE_MCP_STARTUP_WAIT_MS`` in the ``env`` of ``~/.claude/settings.json``
  (unless the user set it), so the first model call waits for the server
  (:data:`roost_plugins.claude.STARTUP_WAIT_ENV` says why);
- the hooks ``SessionStart``, ``UserPromptSubmit``, ``PostToolUse`` and ``Stop``
  (``roost claude hook EVENT``) in ``~/.claude/settings.json``;
- ``mcp__roost`` in that file's ``permissions.allow``: roost's tools are governed by
  roost's own reach rules and limits, so Claude Code need not ask before each call.

Installing twice changes nothing; an older roost's entries are replaced, not doubled.

All or nothing: both files are read and checked before either is written, through
:mod:`roost_core.settingsfile` (as ``roost pi install`` edits pi's): a broken file is a
:class:`~roost_core.settingsfile.SettingsFileError` naming it (and the line and column of
a JSON error), a file that is a symbolic link (a dotfiles setup) is written through the
link, never replaced by a regular file, and a write that fails puts back what was
already written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roost_core import installcommand
from roost_core.installcommand import roost_command
from roost_core.installrecord import Found, forget, remember
from roost_core.settingsfile import (
    SettingsFileError,
    add_hooks,
    list_at,
    object_at,
    read_object,
    settings_without_hooks,
    settings_without_server,
    uninstall_change,
    without_hooks,
    write_all,
)
from roost_plugins.claude import SERVER_NAME, STARTUP_WAIT_ENV, STARTUP_WAIT_MS, config_dir
from roost_plugins.claude.hook import EVENTS

PERMISSION = f"mcp__{SERVER_NAME}"


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    return config_dir(env) / "settings.json"


def user_config_path(env: Mapping[str, str] | None = None) -> Path:
    """Claude Code's user file that holds user-scope MCP servers."""
    env = os.environ if env is None else env
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(env["CLAUDE_CONFIG_DIR"]).expanduser() / ".claude.json"
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".claude.json"


def hook_command(event: str) -> str:
    """The command Claude Code runs for ``event``: ``roost claude hook EVENT``."""
    return installcommand.hook_command("claude", event)


def is_roost_hook(command: Any) -> bool:
    """Ours: ``... claude hook EVENT`` run by a roost (this or another install)."""
    return installcommand.is_roost_hook(command, "claude", events=EVENTS, runners=("roost_core.cli", "roost_plugins.claude", "roost_core.claude"))


def install(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    settings_file, user_file = settings_path(env), user_config_path(env)
    # What both files were, kept for uninstall (roost_core.installrecord).
    found = [Found(settings_file), Found(user_file)]
    # Both files are read and checked before either is written.
    settings = read_object(settings_file)
    user = read_object(user_file)
    hooks = without_hooks(object_at(settings_file, settings, "hooks"), is_roost_hook)
    add_hooks(settings_file, hooks, EVENTS, lambda event: {"type": "command", "command": hook_command(event)}, tool_matcher="*")
    new_settings = {**settings, "hooks": hooks}
    permissions = dict(object_at(settings_file, settings, "permissions"))
    try:
        allow = list_at(settings_file, permissions, "allow")
    except SettingsFileError:
        raise SettingsFileError(settings_file, '"permissions.allow" is not a list') from None
    if PERMISSION not in allow:
        allow = [*allow, PERMISSION]
    permissions["allow"] = allow
    new_settings["permissions"] = permissions
    settings_env = object_at(settings_file, settings, "env")
    if STARTUP_WAIT_ENV not in settings_env:
        # The first model call waits for roost's server (a value the user set is kept).
        new_settings["env"] = {**settings_env, STARTUP_WAIT_ENV: STARTUP_WAIT_MS}

    servers = dict(object_at(user_file, user, "mcpServers"))
    command = roost_command()
    # alwaysLoad: roost's tools are never deferred, and the first call waits for them.
    server = {"type": "stdio", "command": command[0], "args": [*command[1:], "mcp"], "env": {}, "alwaysLoad": True}
    changes = []
    if new_settings != settings:
        changes.append((settings_file, new_settings))
    if servers.get(SERVER_NAME) != server:
        servers[SERVER_NAME] = server
        changes.append((user_file, {**user, "mcpServers": servers}))
    write_all(changes)
    remember(found[0], clean=settings_without_roost(settings) == settings, env=env)
    remember(found[1], clean=settings_without_server(user, SERVER_NAME) == user, env=env)
    return {"settings": str(settings_file), "mcpConfig": str(user_file), "server": server, "changed": bool(changes)}


def settings_without_roost(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings.json`` without roost's hooks, permission and startup wait (a wait of the
    user's own value stays), and nothing else taken out."""
    new_settings = settings_without_hooks(settings, is_roost_hook)
    permissions = settings.get("permissions")
    if isinstance(permissions, dict) and PERMISSION in (permissions.get("allow") or []):
        allow = [rule for rule in permissions["allow"] if rule != PERMISSION]
        new_permissions = {**permissions, "allow": allow}
        if not allow:
            new_permissions.pop("allow")
        if new_permissions:
            new_settings["permissions"] = new_permissions
        else:
            new_settings.pop("permissions")
    settings_env = settings.get("env")
    if isinstance(settings_env, dict) and settings_env.get(STARTUP_WAIT_ENV) == STARTUP_WAIT_MS:
        # roost's value (a value of the user's own is not roost's to take out).
        kept_env = {key: value for key, value in settings_env.items() if key != STARTUP_WAIT_ENV}
        if kept_env:
            new_settings["env"] = kept_env
        else:
            new_settings.pop("env")
    return new_settings


def uninstall(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Take out what :func:`install` added: each file as install found it when it is as
    install left it (no file where there was none), else only roost's entries."""
    settings_file, user_file = settings_path(env), user_config_path(env)
    settings, user = read_object(settings_file), read_object(user_file)
    changes = uninstall_change(settings_file, settings, settings_without_roost(settings), env)
    changes += uninstall_change(user_file, user, settings_without_server(user, SERVER_NAME), env)
    write_all(changes)
    forget(settings_file, env)
    forget(user_file, env)
    return {"settings": str(settings_file), "mcpConfig": str(user_file), "changed": bool(changes)}
