"""The process table as /proc shows it: who is whose child, who carries a job's mark,
and the few kernel calls that make a worker own its descendants.

Only mechanism, no decisions: :mod:`roost_core.worker.supervisor` (in the worker) and the
daemon's worker lifecycle (:meth:`roost_core.daemon.base.DaemonBase.worker_gone`) decide
what to kill and when.

Two ways to find a job's processes, one for each side:

* **Descendants** (the worker, alive): the worker is a *child subreaper*
  (``PR_SET_CHILD_SUBREAPER``), so a process its host starts stays its descendant whatever
  it does — ``setsid``, double fork, its parent dying — and the worker finds them all by
  walking parent links.
* **The mark** (the daemon, once the worker is dead): every worker start gets a fresh
  random mark in its environment (:data:`MARK_VARIABLE`); everything the worker starts
  inherits it, ``setsid`` or not. ``/proc/PID/environ`` is the environment a process was
  started with, so a process cannot lose the mark by changing its own ``environ`` later;
  only one started with a cleared environment (``env -i``) escapes, and only once the
  worker, its subreaper, is dead.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import sys
from collections.abc import Iterable

#: The environment variable that names the worker start a process belongs to.
MARK_VARIABLE = "ROOST_WORKER_MARK"
#: ``prctl`` option numbers (linux/prctl.h).
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants: an orphan among them is
    re-parented to it, not to init. False where the kernel has no such thing."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def is_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(0)
    if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
        return False
    return bool(flag.value)


def pids() -> list[int]:
    """Every process id in /proc."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (field 3, ``state``, is
    index 0), or None when the process is gone. The name may hold spaces and ``)``, so
    the split is at the last ``)``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].decode("ascii", "replace").split()


def parent_links() -> dict[int, int]:
    """pid -> parent pid for every live (not zombie) process."""
    links = {}
    for pid in pids():
        fields = stat_fields(pid)
        if fields is not None and fields[0] != "Z":
            links[pid] = int(fields[1])
    return links


def descendants(ancestor: int) -> list[int]:
    """Every live descendant of ``ancestor`` (not itself), parents before children."""
    children: dict[int, list[int]] = {}
    for pid, parent in parent_links().items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    todo = list(children.get(ancestor, []))
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def alive(pid: int) -> bool:
    """True when ``pid`` is a process that has not exited (a zombie has)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def marked(mark: str, *, spare: Iterable[int] = ()) -> list[int]:
    """Live processes whose starting environment carries ``MARK_VARIABLE=mark``
    (processes of other users cannot be read, and could not be killed either)."""
    needle = f"{MARK_VARIABLE}={mark}".encode()
    skip = {os.getpid(), *spare}
    found = []
    for pid in pids():
        if pid in skip:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:
            continue
        # A zombie's environ reads empty: only the living match.
        if needle in environ.split(b"\0"):
            found.append(pid)
    return found


def signal_all(pids_to_signal: Iterable[int], signum: int) -> None:
    for pid in pids_to_signal:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def kill_marked(mark: str, *, spare: Iterable[int] = (), rounds: int = 10) -> list[int]:
    """SIGKILL every process carrying ``mark`` until none is left (a process may fork
    between a scan and its kill: the next round finds the child, which carries the mark
    too). Returns the pids killed; nothing to talk to is left, so no grace is given."""
    killed: list[int] = []
    spare = set(spare)
    for _ in range(rounds):
        found = [pid for pid in marked(mark, spare=spare) if pid not in killed]
        if not found:
            break
        signal_all(found, signal.SIGKILL)
        killed.extend(found)
    return killed


def reap(pid: int) -> bool:
    """Collect ``pid`` if it is an exited child of this process; True once it is gone."""
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # not our child (or already collected)
    except OSError as exc:  # pragma: no cover - EINTR is retried by Python
        return exc.errno == errno.ECHILD
    return done == pid
