"""Another program's JSON settings, edited by an install command (``roost pi install``,
``roost claude install``): roost's own entries go in and out, everything else stays.

- A file is read whole and checked before anything is written: a missing or empty file
  is ``{}``; one that is not UTF-8, not valid JSON or not a JSON object, or whose key
  holds another type than the one roost edits there, is a :class:`SettingsFileError`
  naming the file (and the line and column where its JSON breaks): ``roost: bad_config``.
- Writes are all or nothing (:func:`write_all`): each file is replaced atomically,
  through a symbolic link (a dotfiles setup: the link stays a link) and keeping its
  permission bits; when one fails, the files written before it are put back
  (:class:`SettingsWriteError`: ``roost: write_failed``).
- A file is written in its own style (:func:`render_json`: its indentation, its final
  newline), so an edit changes only the lines it must; what an install found is kept by
  :mod:`roost_core.installrecord`, so uninstall gives back the very bytes and mode.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any


class SettingsFileError(ValueError):
    """A settings file cannot be read or does not have the shape roost edits
    (``roost: bad_config: FILE:LINE:COLUMN: ...``); nothing was written."""

    def __init__(self, path: Path, message: str, line: int | None = None, column: int | None = None) -> None:
        where = f"{path}:{line}:{column}" if line is not None and column is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.column = path, line, column


class SettingsWriteError(OSError):
    """A file could not be written (``roost: write_failed: FILE: ...``); the files written
    before it were put back as they were."""


def read_object(path: Path) -> dict[str, Any]:
    """``path``'s JSON object ({} for a missing or empty file), or a :class:`SettingsFileError`
    that names the file (and the line and column of a syntax error)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError as exc:
        raise SettingsFileError(path, f"not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise SettingsFileError(path, f"cannot be read: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise SettingsFileError(path, f"not valid JSON: {exc.msg}", exc.lineno, exc.colno) from exc
    if not isinstance(data, dict):
        raise SettingsFileError(path, f"holds a JSON {type(data).__name__}, not an object", 1, 1)
    return data


def object_at(path: Path, data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` when it is an object (absent or null: {}), else a
    :class:`SettingsFileError`."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SettingsFileError(path, f'"{key}" is not an object')
    return value


def list_at(path: Path, data: dict[str, Any], key: str) -> list[Any]:
    """``data[key]`` when it is a list (absent or null: []), else a
    :class:`SettingsFileError`."""
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise SettingsFileError(path, f'"{key}" is not a list')
    return value


def indent_of(text: bytes | None) -> str | int | None:
    """The indentation a JSON file uses: the white space before its first indented line
    (2 spaces for a file with none yet; None for a file on one line)."""
    if not text:
        return 2
    lines = text.decode("utf-8", "replace").splitlines()
    if len(lines) <= 1 and text.strip():
        return None
    for line in lines[1:]:
        stripped = line.lstrip(" \t")
        if stripped and stripped != line:
            return line[: len(line) - len(stripped)]
    return 2


def render_json(data: Any, like: bytes | None = None) -> bytes:
    """``data`` as a settings file's bytes, in the style of ``like`` (the file's bytes
    now): its indentation, and a final newline when it had one (or is new)."""
    indent = indent_of(like)
    text = json.dumps(data, indent=indent, ensure_ascii=False)
    if like is None or like.endswith(b"\n") or not like.strip():
        text += "\n"
    return text.encode("utf-8")


def write_bytes(path: Path, content: bytes, mode: int | None = None) -> None:
    """Replace the file ``path`` names (through any symbolic link: the link stays a link)
    with ``content``, atomically, with ``mode`` (default: the file's own permission bits;
    a new file gets the umask's)."""
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    try:
        tmp.write_bytes(content)
        if mode is None and target.exists():
            mode = target.stat().st_mode & 0o777
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def write_object(path: Path, data: dict[str, Any]) -> None:
    """Replace the file ``path`` names with ``data`` in the file's own style
    (:func:`render_json`), atomically, keeping its permission bits."""
    target = Path(os.path.realpath(path))
    like = target.read_bytes() if target.exists() else None
    write_bytes(path, render_json(data, like))


def write_all(changes: list[Any]) -> None:
    """Write every change (``(path, data)`` with a JSON object, written in the file's
    style; or ``(path, bytes_or_None, mode, dirs)``: exact bytes, or no file and its
    empty ``dirs`` removed); when one fails, put back the files already written (their
    bytes and mode as they were, or no file), so the change is all or nothing."""
    done: list[tuple[Path, bytes | None, int | None]] = []
    for change in changes:
        path, content = change[0], change[1]
        mode, dirs = (change[2], change[3]) if len(change) == 4 else (None, [])
        target = Path(os.path.realpath(path))
        try:
            before = target.read_bytes() if target.exists() else None
            old_mode = target.stat().st_mode & 0o777 if before is not None else None
            if isinstance(content, dict):
                write_object(path, content)
            elif content is None:
                target.unlink(missing_ok=True)
                for folder in dirs:
                    with contextlib.suppress(OSError):  # not empty: the user's files stay
                        os.rmdir(folder)
            else:
                write_bytes(path, content, mode)
        except OSError as exc:
            for written, old, old_mode_of in reversed(done):
                with contextlib.suppress(OSError):
                    if old is None:
                        written.unlink()
                    else:
                        write_bytes(written, old, old_mode_of)
            raise SettingsWriteError(exc.errno, f"{path}: cannot be written: {exc.strerror or exc}") from exc
        done.append((target, before, old_mode))


def uninstall_change(path: Path, current: dict[str, Any], stripped: dict[str, Any], env: Mapping[str, str] | None = None) -> list[Any]:
    """What uninstall writes to the JSON file ``path``, whose object is ``current`` and
    without roost's entries ``stripped``: the bytes and mode install found, or no file,
    or ``stripped`` in the file's style (:func:`roost_core.installrecord.settle`); []
    when nothing changes. For :func:`write_all`."""
    from roost_core.installrecord import settle

    restore = settle(path, current, stripped, empty={}, render=render_json, env=env)
    return [] if restore is None else [restore.change()]


# A ``hooks`` object in Claude Code's shape (Qwen Code and Codex read the same):
# ``{EVENT: [{"matcher"?: ..., "hooks": [{"type": "command", "command": ...}, ...]}, ...]}``.


def add_hooks(
    path: Path,
    hooks: dict[str, Any],
    events: Iterable[str],
    entry: Callable[[str], dict[str, Any]],
    tool_matcher: str,
    tool_event: str = "PostToolUse",
) -> None:
    """Append to ``hooks`` (of the settings file ``path``) one group for each of
    ``events`` holding ``entry(event)``; the group of ``tool_event`` (the program's
    after-a-tool event: Gemini CLI names it ``AfterTool``) matches every tool
    (``tool_matcher``, in the program's own pattern syntax). An event whose value is not a
    list is a :class:`SettingsFileError`."""
    for event in events:
        group: dict[str, Any] = {"hooks": [entry(event)]}
        if event == tool_event:
            group = {"matcher": tool_matcher, **group}
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise SettingsFileError(path, f'"hooks.{event}" is not a list')
        groups.append(group)


def without_hooks(hooks: dict[str, Any], is_ours: Callable[[Any], bool]) -> dict[str, Any]:
    """``hooks`` with every hook whose ``command`` ``is_ours`` taken out (and groups left
    empty dropped); everything else is kept as it is."""
    kept: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            kept[event] = groups
            continue
        new_groups = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                commands = [h for h in group["hooks"] if not (isinstance(h, dict) and is_ours(h.get("command")))]
                if not commands:
                    continue
                group = {**group, "hooks": commands}
            new_groups.append(group)
        if new_groups:
            kept[event] = new_groups
    return kept


def settings_without_hooks(settings: dict[str, Any], is_ours: Callable[[Any], bool]) -> dict[str, Any]:
    """A copy of ``settings`` whose ``hooks`` object has every hook whose ``command``
    ``is_ours`` taken out (:func:`without_hooks`), and no ``hooks`` when that leaves it
    empty; a ``hooks`` that is not an object is kept as it is."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return dict(settings)
    kept = without_hooks(hooks, is_ours)
    if kept:
        return {**settings, "hooks": kept}
    return {key: value for key, value in settings.items() if key != "hooks"}


def settings_without_server(settings: dict[str, Any], name: str) -> dict[str, Any]:
    """A copy of ``settings`` without the MCP server ``name`` in its ``mcpServers`` object,
    and no ``mcpServers`` when that leaves it empty."""
    servers = settings.get("mcpServers")
    if not isinstance(servers, dict) or name not in servers:
        return dict(settings)
    rest = {key: value for key, value in servers.items() if key != name}
    if rest:
        return {**settings, "mcpServers": rest}
    return {key: value for key, value in settings.items() if key != "mcpServers"}
