"""``roost codex install | uninstall | hook EVENT``: put roost into the user's own Codex.

``install`` adds, and ``uninstall`` removes, exactly these, leaving every other setting
as it was:

- the MCP server ``roost`` (``roost mcp``) in ``$CODEX_HOME/config.toml``
  (``~/.codex/config.toml``), as one table after roost's marker comment (Python reads
  TOML but does not write it: the rest of the file is never rewritten). The server
  is ``required`` (Codex waits for it before the first request, else it starts without
  its tools), its tools approved (``approval_policy = "never"`` refuses unapproved MCP
  calls), ``ROOST_MCP_HOST = "codex"`` in its environment (the server answers the hooks
  and reads the rollout) and the roost variables passed on (``env_vars``: Codex hands an
  MCP server only a few variables of its own);
- the hooks ``UserPromptSubmit``, ``PostToolUse`` and ``Stop`` (``roost codex hook
  EVENT``) in ``$CODEX_HOME/hooks.json``;
- Codex's trust of those hooks (Codex runs no hook it has not trusted, silently): when
  the Codex CLI is found, ``codex app-server`` is asked for the hooks' keys and hashes
  (``hooks/list``) and writes their ``hooks.state`` entries itself (``config/batchWrite``),
  as its own hook review does. Without Codex here, the hooks wait for the user's review
  in Codex.

Installing twice changes nothing. A config.toml that is not valid TOML, or that has an
``[mcp_servers.roost]`` of the user's own, is refused (``bad_config``) before anything is
written; a failed write puts back what was written before it (``write_failed``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roost_core import installcommand
from roost_core.installcommand import roost_command
from roost_core.installrecord import Found, forget, remember, settle
from roost_core.settingsfile import (
    SettingsFileError,
    add_hooks,
    object_at,
    read_object,
    settings_without_hooks,
    uninstall_change,
    without_hooks,
    write_all,
)
from roost_plugins.codex import EVENTS, SERVER_NAME, codex_home

BEGIN = "# >>> roost: added by `roost codex install`; `roost codex uninstall` takes it out >>>"
#: roost's block: the marker comment, then its table up to the next blank line or table
#: (no end marker: Codex writes its own tables in after the last key, before a comment).
_BLOCK = re.compile(re.escape(BEGIN) + r"\n\[mcp_servers\." + SERVER_NAME + r"\]\n(?:[^\[\n#][^\n]*(?:\n|\Z))*")
#: The variables the roost MCP server needs from the user's environment.
PASSED_ON = ("ROOST_HOME", "ROOST_CONFIG", "ROOST_NAME", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")
#: How long ``codex app-server`` may take to answer the trust requests.
TRUST_TIMEOUT = 60.0


def config_path(env: Mapping[str, str] | None = None) -> Path:
    return codex_home(env) / "config.toml"


def hooks_path(env: Mapping[str, str] | None = None) -> Path:
    return codex_home(env) / "hooks.json"


def hook_command(event: str) -> str:
    """The command Codex runs for ``event``: ``roost codex hook EVENT``."""
    return installcommand.hook_command("codex", event)


def is_roost_hook(command: Any) -> bool:
    """Ours: ``... codex hook EVENT`` run by a roost."""
    return installcommand.is_roost_hook(command, "codex")


def toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def server_block() -> str:
    """roost's block in config.toml (JSON strings are valid TOML strings)."""
    command = roost_command()
    lines = [
        BEGIN,
        f"[mcp_servers.{SERVER_NAME}]",
        f"command = {json.dumps(command[0])}",
        f"args = {toml_list([*command[1:], 'mcp'])}",
        'env = { ROOST_MCP_HOST = "codex" }',
        f"env_vars = {toml_list(list(PASSED_ON))}",
        "startup_timeout_sec = 30",
        'default_tools_approval_mode = "approve"',
        "required = true",
    ]
    return "\n".join(lines) + "\n"


def read_config(path: Path) -> str:
    """config.toml's text ("" when missing), checked: valid TOML, no server of the user's
    own named ``roost``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsFileError(path, f"cannot be read: {exc}") from exc
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise toml_error(path, text, exc) from exc
    own = tomllib.loads(_BLOCK.sub("\n", text))
    if SERVER_NAME in (own.get("mcp_servers") or {}):
        raise SettingsFileError(path, f"has an [mcp_servers.{SERVER_NAME}] of its own: rename or remove it first")
    return text


def toml_error(path: Path, text: str, exc: tomllib.TOMLDecodeError) -> SettingsFileError:
    """``FILE:LINE:COLUMN: not valid TOML: ...`` for a config.toml that does not parse
    (tomllib says where in its message: ``(at line 3, column 5)``, or ``at end of
    document``)."""
    message = str(exc)
    where = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if where:
        return SettingsFileError(path, f"not valid TOML: {message[:where.start()]}", int(where[1]), int(where[2]))
    end = re.search(r"\s*\(at end of document\)$", message)
    if end:
        lines = text.split("\n")
        return SettingsFileError(path, f"not valid TOML: {message[:end.start()]}", len(lines), len(lines[-1]) + 1)
    return SettingsFileError(path, f"not valid TOML: {message}")


def install(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    config, hooks_file = config_path(env), hooks_path(env)
    # What both files were, kept for uninstall (roost_core.installrecord).
    found = [Found(config), Found(hooks_file)]
    text = read_config(config)
    data = read_object(hooks_file)
    hooks = without_hooks(object_at(hooks_file, data, "hooks"), is_roost_hook)
    add_hooks(hooks_file, hooks, EVENTS, lambda event: {"type": "command", "command": hook_command(event), "timeout": 30}, tool_matcher=".*")
    new_data = {**data, "hooks": hooks}
    block = _BLOCK.search(text)
    if block:  # replaced where it is (Codex may have written after it)
        new_text = text[:block.start()] + server_block() + text[block.end():]
    else:
        base = text.rstrip("\n")
        new_text = (base + "\n\n" if base else "") + server_block()
    changes: list[Any] = []
    if new_text != text:
        changes.append((config, new_text.encode("utf-8"), None, []))
    if new_data != data:
        changes.append((hooks_file, new_data))
    write_all(changes)
    trusted = trust_hooks(env)
    if found[0].mode is not None:
        # Codex writes its trust of the hooks into config.toml with a mode of its own
        # (0600): the file keeps the one it had.
        with contextlib.suppress(OSError):
            os.chmod(found[0].path, found[0].mode)
    remember(found[0], clean=block is None, env=env)
    remember(found[1], clean=settings_without_hooks(data, is_roost_hook) == data, env=env)
    return {"config": str(config), "hooks": str(hooks_file), "changed": bool(changes), "trusted": trusted}


def uninstall(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Take out what :func:`install` added: each file as install found it when it is as
    install left it (no file where there was none), else only roost's block, hooks and
    Codex's trust of them."""
    config, hooks_file = config_path(env), hooks_path(env)
    text = read_config(config)
    data = read_object(hooks_file)
    changes: list[Any] = []
    restore = settle(config, text, stripped_config(env, text, data), empty="", render=lambda stripped, like: stripped.encode("utf-8"), env=env)
    if restore is not None:
        changes.append(restore.change())
    changes += uninstall_change(hooks_file, data, settings_without_hooks(data, is_roost_hook), env)
    write_all(changes)
    forget(config, env)
    forget(hooks_file, env)
    return {"config": str(config), "hooks": str(hooks_file), "changed": bool(changes)}


def stripped_config(env: Mapping[str, str] | None, text: str, hooks_data: dict[str, Any]) -> str:
    """config.toml's ``text`` without roost's block and Codex's trust of roost's hooks
    (asked of Codex, when it is here), the rest as it is."""
    if _BLOCK.search(text) is None:
        return text
    keys = roost_hook_keys(env) if hooks_data else []
    new_text = _BLOCK.sub("", text)
    for key in keys:  # Codex's trust of roost's hooks goes with them
        new_text = re.sub(r"\n*\[hooks\.state\." + re.escape(json.dumps(key)) + r"\]\n(?:[^\[\n][^\n]*\n?)*", "\n", new_text)
    return re.sub(r"\n{3,}", "\n\n", new_text).strip("\n") + "\n" if new_text.strip() else ""


# ---------------------------------------------------------------------- hook trust


def app_server(env: Mapping[str, str] | None, method: str, params: dict[str, Any]) -> Any:
    """One request to ``codex app-server`` (JSON-RPC, one object a line, after
    ``initialize``): its result. Raises when it cannot answer (no Codex, an error)."""
    from roost_plugins.codex import codex_binary

    proc = subprocess.Popen([codex_binary(), "app-server"], cwd=str(codex_home(env).parent), env=dict(os.environ if env is None else env),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    # A server that stops answering must not hang the command.
    watchdog = threading.Timer(TRUST_TIMEOUT, lambda: os.killpg(proc.pid, signal.SIGKILL))
    watchdog.start()
    try:
        assert proc.stdin is not None and proc.stdout is not None
        requests = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": {"name": "roost", "version": "0"}}},
                    {"jsonrpc": "2.0", "method": "initialized"},
                    {"jsonrpc": "2.0", "id": 2, "method": method, "params": params}]
        proc.stdin.write("".join(json.dumps(request) + "\n" for request in requests))
        proc.stdin.flush()
        for line in proc.stdout:  # notifications come in between; the answers carry ids
            message = json.loads(line)
            if message.get("id") in (1, 2) and "error" in message:
                raise RuntimeError(f"codex app-server: {message['error']}")
            if message.get("id") == 2:
                return message["result"]
        raise RuntimeError(f"codex app-server ended before it answered {method}")
    finally:
        watchdog.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def listed_roost_hooks(env: Mapping[str, str] | None) -> list[dict[str, Any]]:
    listed = app_server(env, "hooks/list", {"cwds": [str(codex_home(env).parent)]})
    return [hook for entry in listed.get("data") or [] for hook in entry.get("hooks") or [] if is_roost_hook(hook.get("command"))]


def trust_hooks(env: Mapping[str, str] | None = None) -> list[str] | str:
    """Trust roost's hooks in the user's Codex; the keys trusted, or why not."""
    try:
        hooks = listed_roost_hooks(env)
        edits = [{"keyPath": f"hooks.state.{json.dumps(h['key'])}", "value": {"trusted_hash": h["currentHash"]}, "mergeStrategy": "upsert"} for h in hooks]
        if edits:
            app_server(env, "config/batchWrite", {"edits": edits})
        return [str(h["key"]) for h in hooks]
    except Exception as exc:  # noqa: BLE001 - the hooks stay for the user's review
        return f"not trusted ({exc}): review roost's hooks in Codex"


def roost_hook_keys(env: Mapping[str, str] | None) -> list[str]:
    try:
        return [str(h["key"]) for h in listed_roost_hooks(env)]
    except Exception:  # noqa: BLE001 - without Codex there is no trust to take out
        return []


# ---------------------------------------------------------------------- the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``roost codex``'s arguments (the codex host's command, ``roost_plugins.hosts.codex``)."""
    installcommand.add_arguments(
        parser,
        events=EVENTS,
        action_help="install or uninstall roost's MCP server and hooks; hook: run one (Codex does)",
        event_help="hook: the Codex hook event",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``roost codex ACTION`` (:mod:`roost_core.installcommand`)."""
    return installcommand.run(
        args,
        name="codex",
        # Codex's hooks read the answers Claude Code's do; the relay is the same.
        hook="roost_core.hookrelay:main",
        actions="roost_plugins.codex.install",
        what="roost MCP server and hooks",
        where=lambda result: f"{result['config']} and {result['hooks']}",
        after_install=note_trust,
    )


def note_trust(result: dict[str, Any]) -> None:
    """Say on stderr why the hooks are not trusted yet, when :func:`install` could not."""
    if isinstance(result["trusted"], str):
        print(f"roost: the hooks are {result['trusted']}", file=sys.stderr)
