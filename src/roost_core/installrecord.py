"""What an install command found in the files it edits, so uninstall gives it back.

``roost claude install`` (and codex, gemini, qwen, opencode, pi) edits another program's
files. Before it writes one it keeps, in roost's state (``STATE/installs/``, one record a
file), what the file was: its bytes and permission bits, or that there was none, and the
folders the install made for it; after it wrote, a hash of the bytes it left.

Uninstall then (:func:`settle`):

- the file is as install left it: the bytes and mode it had before are put back, or the
  file and the folders install made are removed when there was none;
- the file was edited since (the user's edits must survive): only roost's entries are
  taken out (what each install module computes), written in the file's own indentation
  and mode; when that leaves what install found (the same JSON), its bytes are put back,
  and when it leaves an empty object where no file was, the file goes.

A file installed with no record (an older roost, another ``ROOST_HOME``) is uninstalled
the second way. Only the standard library.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _digest(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


def records_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the records are kept: roost's state folder, ``installs``."""
    from roost_core.paths import resolve_paths

    return resolve_paths(env).state_dir / "installs"


def _record_path(target: Path, env: Mapping[str, str] | None) -> Path:
    return records_dir(env) / f"{hashlib.sha256(os.fsencode(str(target))).hexdigest()[:32]}.json"


def real(path: Path) -> Path:
    """The file ``path`` names, through any symbolic link (a dotfiles setup)."""
    return Path(os.path.realpath(path))


class Found:
    """A file as an install found it, before writing: its bytes (None: no file), its
    permission bits and the folders above it that do not exist yet."""

    def __init__(self, path: Path) -> None:
        self.path = real(path)
        try:
            self.data: bytes | None = self.path.read_bytes()
            self.mode: int | None = self.path.stat().st_mode & 0o777
        except FileNotFoundError:
            self.data, self.mode = None, None
        self.missing_dirs: list[str] = []
        folder = self.path.parent
        while not folder.exists():
            self.missing_dirs.append(str(folder))
            folder = folder.parent


def load(path: Path, env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The record of the file ``path`` names, or None (none kept, or unreadable)."""
    try:
        record = json.loads(_record_path(real(path), env).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def remember(found: Found, *, clean: bool, env: Mapping[str, str] | None = None) -> None:
    """After an install wrote the file ``found`` was read from: keep what it found.
    ``clean``: what it found held none of roost's entries (so putting it back undoes the
    install); else only whether a file was there and its mode are kept. A record of an
    earlier install whose file is still as that install left it is kept as it is (the
    first install found the user's file; this one found roost's)."""
    now = found.path.read_bytes() if found.path.exists() else None
    old = load(found.path, env)
    if old is not None and old.get("after") == _digest(found.data):
        record = {**old, "after": _digest(now)}
    else:
        # A first install, or a file edited since the last one: what is there now is
        # the user's (with roost's entries of an earlier install, then not clean).
        first = old or {}
        record = {
            "path": str(found.path),
            "existed": first.get("existed", found.data is not None),
            "mode": first.get("mode", found.mode),
            "before": base64.b64encode(found.data).decode() if clean and found.data is not None else None,
            "dirs": first.get("dirs", found.missing_dirs),
            "after": _digest(now),
        }
    folder = records_dir(env)
    from roost_core.paths import private_dir

    private_dir(folder)
    target = _record_path(found.path, env)
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, target)


def forget(path: Path, env: Mapping[str, str] | None = None) -> None:
    """Drop the record of ``path`` (after uninstall)."""
    with contextlib.suppress(OSError):
        _record_path(real(path), env).unlink()


class Restore:
    """What uninstall writes to one file: ``content`` (bytes; None removes the file) with
    ``mode`` (None: the file's own), then the folders in ``dirs`` removed when empty."""

    def __init__(self, path: Path, content: bytes | None, mode: int | None = None, dirs: list[str] | None = None) -> None:
        self.path = real(path)
        self.content = content
        self.mode = mode
        self.dirs = dirs or []

    def change(self) -> tuple[Path, bytes | None, int | None, list[str]]:
        """This as :func:`roost_core.settingsfile.write_all` takes it."""
        return (self.path, self.content, self.mode, self.dirs)


def settle(path: Path, current: Any, stripped: Any, *, empty: Any, render: Any, env: Mapping[str, str] | None = None) -> Restore | None:
    """What uninstall writes to ``path`` (None: nothing to change). ``current``: the
    file's content now (a JSON object, or a text); ``stripped``: that with roost's
    entries taken out; ``empty`` what that is for a file that holds nothing else (``{}``,
    ``""``); ``render(stripped, like)`` its bytes in the style of the file's bytes
    ``like``. See the module for the rule."""
    found = Found(path)
    if found.data is None:
        return None  # nothing there: nothing to take out
    record = load(path, env)
    before = base64.b64decode(record["before"]) if record and record.get("before") is not None else None
    if record is not None and record.get("after") == _digest(found.data):
        if before is not None:
            return Restore(path, before, record.get("mode"))
        if not record.get("existed"):
            return Restore(path, None, dirs=record.get("dirs"))
    if stripped == current:
        return None  # none of roost's entries: the file is the user's as it is
    if record is not None and not record.get("existed") and stripped == empty:
        return Restore(path, None, dirs=record.get("dirs"))
    if before is not None and _same_content(before, stripped):
        return Restore(path, before, record.get("mode") if record else None)
    content = render(stripped, found.data)
    if content == found.data:
        return None
    return Restore(path, content)


def _same_content(before: bytes, stripped: Any) -> bool:
    """Whether the bytes install found say what ``stripped`` says."""
    if isinstance(stripped, str):
        return before.decode("utf-8", "replace") == stripped
    try:
        return bool(json.loads(before.decode("utf-8") or "{}") == stripped)
    except ValueError:
        return False
