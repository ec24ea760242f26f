"""Who carries a job's mark, and ending them: the daemon's side of "nothing a job starts
outlives it", on the process table as :mod:`roost_core.platform` reads it.

Only mechanism, no decisions: :mod:`roost_core.worker.supervisor` (in the worker) and the
daemon's worker lifecycle (:meth:`roost_core.daemon.workers.Workers.worker_gone`) decide
what to kill and when.

Two ways to find a job's processes, one for each side:

* **Descendants** (the worker, alive): :class:`roost_core.platform.Family` (a child
  subreaper on Linux; tracked descendants, process groups and the mark elsewhere), so a
  process its host starts stays the worker's whatever it does — ``setsid``, double fork,
  its parent dying.
* **The mark** (the daemon, once the worker is dead): every worker start gets a fresh
  random mark in its environment (:data:`MARK_VARIABLE`); everything the worker starts
  inherits it, ``setsid`` or not. The environment a process was *started* with is read
  (:func:`roost_core.platform.processes_with_env`), so a process cannot lose the mark by
  changing its own ``environ`` later; only one started with a cleared environment
  (``env -i``) escapes, and only once the worker, which owns its descendants, is dead.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterable

from roost_core import platform

#: The environment variable that names the worker start a process belongs to.
MARK_VARIABLE = "ROOST_WORKER_MARK"


def mark_entry(mark: str) -> str:
    """The environment entry (``NAME=value``) that worker start ``mark`` gives its processes."""
    return f"{MARK_VARIABLE}={mark}"


def descendants(ancestor: int, links: dict[int, int]) -> list[int]:
    """Every process under ``ancestor`` (not itself) by the parent ``links``, parents
    before children."""
    children: dict[int, list[int]] = {}
    for pid, parent in links.items():
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
    return platform.is_running(pid)


def marked(mark: str, *, spare: Iterable[int] = ()) -> list[int]:
    """Live processes whose starting environment carries ``MARK_VARIABLE=mark``
    (processes of other users cannot be read, and could not be killed either)."""
    return platform.processes_with_env(mark_entry(mark), skip={os.getpid(), *spare})


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
