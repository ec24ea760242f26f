"""``roost opencode install | uninstall | hook``: roost in the user's own OpenCode.

``install`` adds exactly two things to OpenCode's global config folder
(``$XDG_CONFIG_HOME/opencode``, else ``~/.config/opencode``):

- the local MCP server ``roost`` (``roost mcp``, with ``ROOST_MCP_HOST=opencode``: it
  listens for the plugin's hook and registers the session as an OpenCode one) in
  ``opencode.json``, which OpenCode starts in every session: the session joins the team
  on its first roost tool call, and can take what waits for it with ``roost_inbox``;
- roost's plugin, ``plugins/roost.js`` (a copy of ``roost_plugin.js`` that knows its
  ``roost opencode hook PostToolUse`` command): after each tool call it hands what waits
  over in that tool's result (mid-turn).

Every other setting (the user's providers, MCP servers, plugins) is kept; installing
twice changes nothing, and ``uninstall`` takes out only what roost added. ``opencode.json``
is edited through :mod:`roost_core.settingsfile`: a file that is not a JSON object stops it
with ``bad_config`` naming the file and line (nothing is written), and a symbolic link is
written through. A ``plugins/roost.js`` that roost did not write is left alone (install
stops with ``bad_config``).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roost_core import installcommand
from roost_core.installcommand import roost_command
from roost_core.installrecord import Found, forget, load, remember
from roost_core.settingsfile import (
    SettingsFileError,
    object_at,
    read_object,
    uninstall_change,
    write_all,
)
from roost_plugins.opencode import PLUGIN_FILE, SERVER_NAME

#: The first line of the plugin copy roost writes (what uninstall and a new install
#: recognise as roost's own).
PLUGIN_HEADER = "// Written by `roost opencode install`; `roost opencode uninstall` removes it."


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """OpenCode's global config file."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "opencode" / "opencode.json"


def plugin_path(env: Mapping[str, str] | None = None) -> Path:
    return config_path(env).parent / "plugins" / "roost.js"


def server_entry() -> dict[str, Any]:
    return {"type": "local", "command": [*roost_command(), "mcp"], "environment": {"ROOST_MCP_HOST": "opencode"}, "enabled": True}


def plugin_text() -> str:
    """roost's plugin with its hook command filled in."""
    hook = [*roost_command(), "opencode", "hook", "PostToolUse"]
    source = PLUGIN_FILE.read_text()
    filled = source.replace("const HOOK = null;", f"const HOOK = {json.dumps(hook)};", 1)
    return f"{PLUGIN_HEADER}\n{filled}"


def ours(path: Path) -> bool:
    try:
        return path.read_text().startswith(PLUGIN_HEADER)
    except FileNotFoundError:
        return False


def without_roost(config: dict[str, Any]) -> dict[str, Any]:
    """``opencode.json`` without roost's server (and no ``mcp`` when that leaves it
    empty), nothing else taken out."""
    servers = config.get("mcp")
    if not isinstance(servers, dict) or SERVER_NAME not in servers:
        return config
    kept = {name: value for name, value in servers.items() if name != SERVER_NAME}
    new = {**config, "mcp": kept}
    if not kept:
        new.pop("mcp")
    return new


def install(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    path, plugin = config_path(env), plugin_path(env)
    # What both files were, kept for uninstall (roost_core.installrecord).
    found = [Found(path), Found(plugin)]
    config = read_object(path)
    servers = dict(object_at(path, config, "mcp"))
    if plugin.exists() and not ours(plugin):
        raise SettingsFileError(plugin, "is not roost's plugin (roost leaves it alone; move it to install roost's)")
    server = server_entry()
    changes: list[Any] = []
    if servers.get(SERVER_NAME) != server:
        servers[SERVER_NAME] = server
        changes.append((path, {**config, "mcp": servers}))
    text = plugin_text()
    if not plugin.exists() or plugin.read_text() != text:
        changes.append((plugin, text.encode(), None, []))
    write_all(changes)
    remember(found[0], clean=without_roost(config) == config, env=env)
    remember(found[1], clean=found[1].data is None, env=env)
    return {"config": str(path), "plugin": str(plugin), "server": server, "changed": bool(changes)}


def uninstall(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Take out roost's server (the file as install found it when it is as install left
    it, no file where there was none) and roost's plugin, with the folders install made
    for it when they are left empty."""
    path, plugin = config_path(env), plugin_path(env)
    config = read_object(path)
    changes = uninstall_change(path, config, without_roost(config), env)
    if ours(plugin):
        record = load(plugin, env)
        changes.append((plugin, None, None, (record or {}).get("dirs") or []))
    write_all(changes)
    forget(path, env)
    forget(plugin, env)
    return {"config": str(path), "plugin": str(plugin), "changed": bool(changes)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost opencode``'s arguments."""
    installcommand.add_arguments(
        parser,
        events=["PostToolUse"],
        action_help="install or uninstall roost's MCP server and plugin in OpenCode; hook: run one (roost's plugin does)",
        event_help="hook: the event (PostToolUse: a tool call ended)",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``roost opencode install | uninstall | hook EVENT``: 0 done, 1 a broken or
    unwritable config, 2 a usage error (:mod:`roost_core.installcommand`)."""
    return installcommand.run(
        args,
        name="opencode",
        # The same relay as Claude Code's hooks: the session's roost mcp server answers.
        hook="roost_core.hookrelay:main",
        actions="roost_plugins.opencode.install",
        what="roost MCP server and plugin",
        program="roost_plugins.opencode:opencode_binary",
        where=lambda result: f"{result['config']} and {result['plugin']}",
    )
