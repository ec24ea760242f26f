"""Writer locks beside session files, and process liveness.

A writer lock is ``<session file>.lock`` holding ``{"pid", "createTime"}``. Liveness is
pid alive **and** create time equal, so a reused pid is never mistaken for the holder.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import psutil

from roost_core import platform

log = logging.getLogger("roost.locks")


def lock_path(session: str | Path) -> Path:
    return Path(str(session) + ".lock")


def create_time(pid: int) -> float | None:
    """When process ``pid`` started (:func:`roost_core.platform.process_start_time`), or
    None when there is no such process."""
    return platform.process_start_time(pid)




def owner_uid(pid: int) -> int | None:
    """The real uid of process ``pid``, or None when there is no such process."""
    try:
        return psutil.Process(pid).uids().real
    except (psutil.Error, ValueError, OverflowError):
        return None


def is_alive(pid: int | None, expected_create_time: float | None = None) -> bool:
    """True when ``pid`` runs and, if given, started at ``expected_create_time``. A create
    time that is not a number (a damaged lock file) matches no process."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if expected_create_time is not None and (
        not isinstance(expected_create_time, (int, float)) or isinstance(expected_create_time, bool) or expected_create_time != expected_create_time
    ):
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        pass
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return False
    if expected_create_time is None:
        return True
    actual = create_time(pid)
    return actual is not None and abs(actual - expected_create_time) < 0.01


def read_lock(session: str | Path) -> dict[str, Any] | None:
    """The lock's record, or None when there is none or it is not a JSON object."""
    try:
        data = json.loads(lock_path(session).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def lock_garbage(session: str | Path) -> str | None:
    """What is wrong with the lock file of ``session``, if it exists and names no process
    the way roost writes it (``{"pid": int, "createTime": number or null}``)."""
    path = lock_path(session)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return f"not JSON ({len(raw)} bytes)"
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    pid, created = data.get("pid"), data.get("createTime")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return f"no process id (pid {pid!r})"
    if created is not None and (not isinstance(created, (int, float)) or isinstance(created, bool)):
        return f"no create time (createTime {created!r})"
    return None


def lock_holder(session: str | Path) -> int | None:
    """The pid holding the writer lock of ``session``, if that process is alive."""
    data = read_lock(session)
    if not data:
        return None
    pid = data.get("pid")
    if is_alive(pid, data.get("createTime")):
        return pid
    return None


class WriterLock:
    """Take the writer lock of a session file for this process (or ``pid``)."""

    def __init__(self, session: str | Path, pid: int | None = None) -> None:
        self.session = Path(session)
        self.pid = pid or os.getpid()

    def acquire(self) -> None:
        holder = lock_holder(self.session)
        if holder is not None and holder != self.pid:
            raise RuntimeError(f"{self.session} is held by pid {holder}")
        garbage = lock_garbage(self.session)
        if garbage is not None:
            # It names no live process, so nobody holds the file: take it over, and say so.
            log.warning("writer lock %s holds garbage (%s); taking it over", lock_path(self.session), garbage)
        self.session.parent.mkdir(parents=True, exist_ok=True)
        path = lock_path(self.session)
        tmp = path.with_name(path.name + f".{self.pid}.tmp")
        tmp.write_text(json.dumps({"pid": self.pid, "createTime": create_time(self.pid)}))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    def release(self) -> None:
        data = read_lock(self.session)
        if data and data.get("pid") == self.pid:
            try:
                lock_path(self.session).unlink()
            except FileNotFoundError:
                pass

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_descendant(pid: int, ancestor: int) -> bool:
    """True when ``pid`` is ``ancestor`` or one of its descendants."""
    try:
        process = psutil.Process(pid)
        if process.pid == ancestor:
            return True
        return any(parent.pid == ancestor for parent in process.parents())
    except psutil.Error:
        return False
