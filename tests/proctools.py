"""Tests' own view of the process table, read by psutil (``/proc`` on Linux, the kernel's
process table on macOS and the BSDs): never roost's code or bookkeeping (a test of
"nothing outlives the job" must not trust what it tests).

A process is named by (pid, start time), so a reused pid is never taken for the process
it replaced; a zombie counts as dead (it has exited; only its exit status waits to be
collected).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil

Proc = tuple[int, float]


def _process(pid: int) -> psutil.Process | None:
    try:
        process = psutil.Process(pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        return process
    except (psutil.Error, ValueError, OverflowError):
        return None


def proc(pid: int) -> Proc | None:
    """``(pid, start time)`` of a live process, else None."""
    process = _process(pid)
    if process is None:
        return None
    try:
        return pid, process.create_time()
    except psutil.Error:
        return None


def alive(p: Proc) -> bool:
    return proc(p[0]) == p


def listed(p: Proc) -> bool:
    """True while ``p`` has an entry in the process table, a zombie included (it is not
    reaped)."""
    try:
        return psutil.Process(p[0]).create_time() == p[1]
    except (psutil.Error, ValueError, OverflowError):
        return False


def parent(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except (psutil.Error, ValueError, OverflowError):
        return None


def session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def all_pids() -> list[int]:
    return psutil.pids()


def tree(pid: int) -> set[Proc]:
    """``pid`` and every live descendant of it, by the parent links now."""
    children: dict[int, list[int]] = {}
    for other in all_pids():
        up = parent(other)
        if up is not None and proc(other) is not None:
            children.setdefault(up, []).append(other)
    found = {p} if (p := proc(pid)) else set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if (c := proc(child)) is not None:
                found.add(c)
                todo.append(child)
    return found


def _each() -> Iterator[tuple[int, psutil.Process]]:
    for pid in all_pids():
        process = _process(pid)
        if process is not None:
            yield pid, process


def cmdline(pid: int) -> str:
    """The command line of ``pid``, its arguments joined by spaces ("" when it is gone)."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except (psutil.Error, ValueError, OverflowError):
        return ""


def with_cmdline(token: str) -> set[Proc]:
    """Live processes whose command line holds ``token``."""
    found = set()
    for pid, _ in _each():
        if token in cmdline(pid) and (p := proc(pid)) is not None:
            found.add(p)
    return found


def with_environ(key: str, value: str) -> set[Proc]:
    """Live processes that were started with ``key=value`` in their environment."""
    found = set()
    for pid, process in _each():
        try:
            environ = process.environ()
        except (psutil.Error, OSError):
            continue
        if environ.get(key) == value and (p := proc(pid)) is not None:
            found.add(p)
    return found


def environ(pid: int) -> dict[str, str]:
    """The environment ``pid`` was started with (empty when it cannot be read)."""
    try:
        return dict(psutil.Process(pid).environ())
    except (psutil.Error, OSError):
        return {}


def with_cwd(path: Path) -> set[Proc]:
    """Live processes whose working directory is ``path`` (a worker runs in its job's
    cwd: a test that gives its job a folder of its own finds the job's workers by it,
    whether or not any record names them)."""
    target = os.path.realpath(path)
    found = set()
    for pid, process in _each():
        try:
            cwd = process.cwd()
        except (psutil.Error, OSError):
            continue
        if cwd == target and (p := proc(pid)) is not None:
            found.add(p)
    return found


def ignores(pid: int, *signums: int) -> bool:
    """True when ``pid`` ignores every one of ``signums`` (its mask of ignored signals, as
    ``ps`` shows it: psutil has none)."""
    shown = subprocess.run(["ps", "-o", "sigignore=", "-p", str(pid)], capture_output=True, text=True, check=False).stdout.strip()
    if not shown:
        return False
    mask = int(shown, 16)
    return all(mask & (1 << (signum - 1)) for signum in signums)


def escapee_command(pidfile: Path, token: str) -> str:
    """A bash command that leaves a grandchild behind the way a daemonising tool does:
    a new session (``setsid``), SIGTERM and SIGHUP ignored, stdio detached; it writes its
    pid to ``pidfile`` and runs as ``token`` (its argv[0]) for five minutes."""
    inner = f'trap "" TERM HUP; echo $$ > {shlex.quote(str(pidfile))}.tmp; mv {shlex.quote(str(pidfile))}.tmp {shlex.quote(str(pidfile))}; exec -a {shlex.quote(token)} sleep 300'
    return f"setsid bash -c {shlex.quote(inner)} </dev/null >/dev/null 2>&1 &"


def escapee(pidfile: Path, token: str) -> Proc | None:
    """The escapee once it runs as ``token`` (None before)."""
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return None
    p = proc(pid)
    if p is None or token not in cmdline(pid):
        return None
    return p


def check_escapee(p: Proc) -> None:
    """Assert the escapee really is one: its own session, deaf to SIGTERM and SIGHUP."""
    pid = p[0]
    assert session(pid) == pid, "the escapee is not in a session of its own"
    assert ignores(pid, signal.SIGTERM, signal.SIGHUP), "the escapee does not ignore SIGTERM and SIGHUP"


def kill9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def kill_named(names: list[str]) -> None:
    """Kill -9 every process whose command line holds one of ``names`` (what a failed test
    left running), emptying the list."""
    while names:
        for pid, _start in with_cmdline(names.pop()):
            try:
                kill9(pid)
            except ProcessLookupError:
                pass
