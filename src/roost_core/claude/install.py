"""``roost claude install | uninstall``: put roost into the user's own Claude Code.

``install`` adds, and ``uninstall`` removes, exactly three things, leaving every other
setting as it was:

- the MCP server ``roost`` (``roost mcp``) in the user-scope MCP servers, ``mcpServers``
  of ``~/.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json`` when that is set), which
  Claude Code starts in every session;
- the hooks ``SessionStart``, ``UserPromptSubmit``, ``PostToolUse`` and ``Stop``
  (``roost claude hook EVENT``) in ``~/.claude/settings.json``;
- ``mcp__roost`` in that file's ``permissions.allow``: roost's tools are governed by
  roost's own reach rules and limits, so Claude Code need not ask before each call.

Installing twice changes nothing; an older roost's entries are replaced, not doubled.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from roost_core.claude import SERVER_NAME, config_dir
from roost_core.claude.hook import EVENTS

PERMISSION = f"mcp__{SERVER_NAME}"


def settings_path(env: dict[str, str] | None = None) -> Path:
    return config_dir(env) / "settings.json"


def user_config_path(env: dict[str, str] | None = None) -> Path:
    """Claude Code's user file that holds user-scope MCP servers."""
    env = os.environ if env is None else env
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(env["CLAUDE_CONFIG_DIR"]).expanduser() / ".claude.json"
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".claude.json"


def roost_command() -> list[str]:
    """How Claude Code should run roost: the ``roost`` script beside this Python, else
    ``python -m roost_core.cli`` (never a bare name that PATH might resolve elsewhere)."""
    beside = Path(sys.executable).parent / "roost"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("roost")
    return [found] if found else [sys.executable, "-m", "roost_core.cli"]


def hook_command(event: str) -> str:
    return " ".join(shlex.quote(part) for part in [*roost_command(), "claude", "hook", event])


def is_roost_hook(command: Any) -> bool:
    """Ours: ``... claude hook EVENT`` run by a roost (this or another install)."""
    if not isinstance(command, str):
        return False
    try:
        parts = shlex.split(command)
    except ValueError:
        return False
    if len(parts) < 4 or parts[-3:-1] != ["claude", "hook"] or parts[-1] not in EVENTS:
        return False
    runner = parts[:-3]
    return Path(runner[0]).name == "roost" or "roost_core.cli" in runner or "roost_core.claude" in runner


def read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    data = json.loads(text or "{}")
    if not isinstance(data, dict):
        raise TypeError(f"{path} does not hold a JSON object")
    return data


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)


def without_roost_hooks(hooks: dict[str, Any]) -> dict[str, Any]:
    """``hooks`` with every roost command taken out (and groups left empty dropped)."""
    kept: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            kept[event] = groups
            continue
        new_groups = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                commands = [h for h in group["hooks"] if not (isinstance(h, dict) and is_roost_hook(h.get("command")))]
                if not commands:
                    continue
                group = {**group, "hooks": commands}
            new_groups.append(group)
        if new_groups:
            kept[event] = new_groups
    return kept


def install(env: dict[str, str] | None = None) -> dict[str, Any]:
    settings_file, user_file = settings_path(env), user_config_path(env)
    settings = read_json(settings_file)
    hooks = settings.get("hooks") or {}
    if not isinstance(hooks, dict):
        raise TypeError(f"{settings_file}: hooks is not an object")
    hooks = without_roost_hooks(hooks)
    for event in EVENTS:
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": hook_command(event)}]}
        if event == "PostToolUse":
            group = {"matcher": "*", **group}
        hooks.setdefault(event, []).append(group)
    new_settings = {**settings, "hooks": hooks}
    permissions = dict(settings.get("permissions") or {})
    allow = list(permissions.get("allow") or [])
    if PERMISSION not in allow:
        allow.append(PERMISSION)
    permissions["allow"] = allow
    new_settings["permissions"] = permissions
    changed = new_settings != settings
    if changed:
        write_json(settings_file, new_settings)

    user = read_json(user_file)
    servers = dict(user.get("mcpServers") or {})
    command = roost_command()
    server = {"type": "stdio", "command": command[0], "args": [*command[1:], "mcp"], "env": {}}
    if servers.get(SERVER_NAME) != server:
        servers[SERVER_NAME] = server
        write_json(user_file, {**user, "mcpServers": servers})
        changed = True
    return {"settings": str(settings_file), "mcpConfig": str(user_file), "server": server, "changed": changed}


def uninstall(env: dict[str, str] | None = None) -> dict[str, Any]:
    settings_file, user_file = settings_path(env), user_config_path(env)
    changed = False
    if settings_file.exists():
        settings = read_json(settings_file)
        new_settings = dict(settings)
        hooks = settings.get("hooks")
        if isinstance(hooks, dict):
            kept = without_roost_hooks(hooks)
            if kept:
                new_settings["hooks"] = kept
            else:
                new_settings.pop("hooks", None)
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
        if new_settings != settings:
            write_json(settings_file, new_settings)
            changed = True
    if user_file.exists():
        user = read_json(user_file)
        servers = user.get("mcpServers")
        if isinstance(servers, dict) and SERVER_NAME in servers:
            servers = {name: value for name, value in servers.items() if name != SERVER_NAME}
            write_json(user_file, {**user, "mcpServers": servers})
            changed = True
    return {"settings": str(settings_file), "mcpConfig": str(user_file), "changed": changed}
