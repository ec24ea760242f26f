"""``roost claude install | uninstall``: put roost into the user's own Claude Code.

``install`` adds, and ``uninstall`` removes, exactly four things, leaving every other
setting as it was:

- the MCP server ``roost`` (``roost mcp``, ``alwaysLoad``) in the user-scope MCP servers,
  ``mcpServers`` of ``~/.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json`` when that is
  set), which Claude Code starts in every session;
- ``CLAUDE_CODE_MCP_STARTUP_WAIT_MS`` in the ``env`` of ``~/.claude/settings.json``
  (unless the user set it), so the first model call waits for the server
  (:data:`roost_core.claude.STARTUP_WAIT_ENV` says why);
- the hooks ``SessionStart``, ``UserPromptSubmit``, ``PostToolUse`` and ``Stop``
  (``roost claude hook EVENT``) in ``~/.claude/settings.json``;
- ``mcp__roost`` in that file's ``permissions.allow``: roost's tools are governed by
  roost's own reach rules and limits, so Claude Code need not ask before each call.

Installing twice changes nothing; an older roost's entries are replaced, not doubled.

All or nothing: both files are read and checked before either is written
(:class:`ClaudeConfigError` names the file, and the line and column of a JSON error), and
a file that is a symbolic link (a dotfiles setup) is written through the link, never
replaced by a regular file. A write that fails puts back what was already written.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roost_core.claude import SERVER_NAME, STARTUP_WAIT_ENV, STARTUP_WAIT_MS, config_dir
from roost_core.claude.hook import EVENTS

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


class ClaudeConfigError(ValueError):
    """One of Claude Code's files cannot be read or does not have the shape roost edits
    (``roost: bad_config: FILE:LINE:COLUMN: ...``); nothing was written."""

    def __init__(self, path: Path, message: str, line: int | None = None, column: int | None = None) -> None:
        where = f"{path}:{line}:{column}" if line is not None and column is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.column = path, line, column


class ClaudeWriteError(OSError):
    """A file could not be written (``roost: write_failed: FILE: ...``); the files written
    before it were put back as they were."""


def read_json(path: Path) -> dict[str, Any]:
    """``path``'s JSON object ({} for a missing or empty file), or a :class:`ClaudeConfigError`
    that names the file (and the line and column of a syntax error)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError as exc:
        raise ClaudeConfigError(path, f"not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise ClaudeConfigError(path, f"cannot be read: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise ClaudeConfigError(path, f"not valid JSON: {exc.msg}", exc.lineno, exc.colno) from exc
    if not isinstance(data, dict):
        raise ClaudeConfigError(path, f"holds a JSON {type(data).__name__}, not an object", 1, 1)
    return data


def object_at(path: Path, data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` when it is an object (or absent: {}), else a :class:`ClaudeConfigError`."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ClaudeConfigError(path, f'"{key}" is not an object')
    return value


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace the file ``path`` names (through any symbolic link: the link stays a link)
    with ``data``, atomically, keeping its permission bits."""
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o777)
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def write_all(changes: list[tuple[Path, dict[str, Any]]]) -> None:
    """Write every ``(path, data)``; when one fails, put back the files already written
    (their bytes as they were, or no file), so the install is all or nothing."""
    done: list[tuple[Path, bytes | None]] = []
    for path, data in changes:
        target = Path(os.path.realpath(path))
        try:
            before = target.read_bytes() if target.exists() else None
            write_json(path, data)
        except OSError as exc:
            for written, old in reversed(done):
                with contextlib.suppress(OSError):
                    if old is None:
                        written.unlink()
                    else:
                        written.write_bytes(old)
            raise ClaudeWriteError(exc.errno, f"{path}: cannot be written: {exc.strerror or exc}") from exc
        done.append((target, before))


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


def install(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    settings_file, user_file = settings_path(env), user_config_path(env)
    # Both files are read and checked before either is written.
    settings = read_json(settings_file)
    user = read_json(user_file)
    hooks = without_roost_hooks(object_at(settings_file, settings, "hooks"))
    for event in EVENTS:
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": hook_command(event)}]}
        if event == "PostToolUse":
            group = {"matcher": "*", **group}
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ClaudeConfigError(settings_file, f'"hooks.{event}" is not a list')
        groups.append(group)
    new_settings = {**settings, "hooks": hooks}
    permissions = dict(object_at(settings_file, settings, "permissions"))
    allow = permissions.get("allow") or []
    if not isinstance(allow, list):
        raise ClaudeConfigError(settings_file, '"permissions.allow" is not a list')
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
    return {"settings": str(settings_file), "mcpConfig": str(user_file), "server": server, "changed": bool(changes)}


def uninstall(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    settings_file, user_file = settings_path(env), user_config_path(env)
    settings, user = read_json(settings_file), read_json(user_file)
    changes = []
    if settings:
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
        settings_env = settings.get("env")
        if isinstance(settings_env, dict) and settings_env.get(STARTUP_WAIT_ENV) == STARTUP_WAIT_MS:
            # roost's value (a value of the user's own is not roost's to take out).
            kept_env = {key: value for key, value in settings_env.items() if key != STARTUP_WAIT_ENV}
            if kept_env:
                new_settings["env"] = kept_env
            else:
                new_settings.pop("env")
        if new_settings != settings:
            changes.append((settings_file, new_settings))
    servers = user.get("mcpServers")
    if isinstance(servers, dict) and SERVER_NAME in servers:
        servers = {name: value for name, value in servers.items() if name != SERVER_NAME}
        changes.append((user_file, {**user, "mcpServers": servers}))
    write_all(changes)
    return {"settings": str(settings_file), "mcpConfig": str(user_file), "changed": bool(changes)}
