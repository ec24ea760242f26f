"""Tests' own view of the process table, read straight from /proc: never roost's code or
bookkeeping (a test of "nothing outlives the job" must not trust what it tests).

A process is named by (pid, start time in clock ticks since boot), so a reused pid is
never taken for the process it replaced; a zombie counts as dead (it has exited; only
its exit status waits to be collected).
"""

from __future__ import annotations

import os
import shlex
import signal
from pathlib import Path

Proc = tuple[int, int]


def _stat(pid: int) -> list[str] | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].decode().split()


def proc(pid: int) -> Proc | None:
    """``(pid, start time)`` of a live process, else None."""
    fields = _stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return pid, int(fields[19])


def alive(p: Proc) -> bool:
    return proc(p[0]) == p


def parent(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def session(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[3]) if fields else None


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def tree(pid: int) -> set[Proc]:
    """``pid`` and every live descendant of it, by the parent links in /proc now."""
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


def with_cmdline(token: str) -> set[Proc]:
    """Live processes whose command line holds ``token``."""
    found = set()
    for pid in all_pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if token in cmdline and (p := proc(pid)) is not None:
            found.add(p)
    return found


def with_environ(key: str, value: str) -> set[Proc]:
    """Live processes that were started with ``key=value`` in their environment."""
    needle = f"{key}={value}".encode()
    found = set()
    for pid in all_pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and (p := proc(pid)) is not None:
            found.add(p)
    return found


def with_cwd(path: Path) -> set[Proc]:
    """Live processes whose working directory is ``path`` (a worker runs in its job's
    cwd: a test that gives its job a folder of its own finds the job's workers by it,
    whether or not any record names them)."""
    target = os.path.realpath(path)
    found = set()
    for pid in all_pids():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd == target and (p := proc(pid)) is not None:
            found.add(p)
    return found


def ignores(pid: int, *signums: int) -> bool:
    """True when ``pid`` ignores every one of ``signums`` (``SigIgn`` in its status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            mask = int(line.split()[1], 16)
            return all(mask & (1 << (signum - 1)) for signum in signums)
    return False


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
    if p is None or token not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
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
