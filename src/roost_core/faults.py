"""Named crash points and I/O fault points for the reliability suite.

Crash points: ``daemon.after_accept_before_persist``, ``daemon.after_persist_before_answer``,
``daemon.after_worker_start``, ``daemon.during_handback``, ``daemon.report_routing``,
``store.during_atomic_write``,
``worker.after_steer_before_message_end``, ``worker.after_message_end_before_ack``,
``worker.before_handback``.

``ROOST_FAULTS=name[,name...]`` makes the process SIGKILL itself the first time it reaches
a named crash point; a marker file under ``$ROOST_HOME/faults`` makes each fire only once,
so the restarted process gets past it. Unset (always, outside tests) it costs one lookup.

I/O fault points (:data:`IO_POINTS`) stand just before a write or an fsync of durable
state: ``io.<file>.write`` and ``io.<file>.fsync`` for ``journal`` (the queue journal and
its rewrites), ``record`` (job records), ``receipts`` (dead letters) and ``session`` (a
session file that roost writes; it is never fsynced, so it has no fsync point). Named in
``ROOST_FAULTS``, a point raises ``OSError`` while the file ``$ROOST_HOME/faults/<point>``
exists and holds an errno name (``ENOSPC``, ``EIO``...): a test writes the file to make
the disk fail, and removes it to give the space back, with no restart.
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

IO_POINTS = tuple(
    f"io.{target}.{step}"
    for target in ("journal", "record", "receipts", "session")
    for step in ("write", "fsync")
    if (target, step) != ("session", "fsync")
)


_wanted: frozenset[str] | None = None


def _armed() -> frozenset[str]:
    """The points ``ROOST_FAULTS`` names, read once per process (``os.environ`` is slow
    enough to show on the daemon's hot path, which passes points per message)."""
    global _wanted
    if _wanted is None:
        _wanted = frozenset(filter(None, os.environ.get("ROOST_FAULTS", "").split(",")))
    return _wanted


def _forget() -> None:
    global _wanted
    _wanted = None


# A forked child (a worker from the fork server) reads its own environment again.
os.register_at_fork(after_in_child=_forget)


def point(name: str) -> None:
    if name not in (_wanted if _wanted is not None else _armed()):
        return
    home = os.environ.get("ROOST_HOME")
    if not home:
        return
    folder = Path(home) / "faults"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(folder / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def armed(name: str) -> bool:
    """True when ``ROOST_FAULTS`` names ``name`` (a writer that simulates a torn write
    around an I/O point splits its write only then)."""
    return name in (_wanted if _wanted is not None else _armed())


def io(name: str) -> None:
    """An I/O fault point: raise the ``OSError`` that ``$ROOST_HOME/faults/<name>`` names,
    if ``ROOST_FAULTS`` arms ``name`` and that file exists."""
    if name not in (_wanted if _wanted is not None else _armed()):
        return
    home = os.environ.get("ROOST_HOME")
    if not home:
        return
    try:
        wanted = (Path(home) / "faults" / name).read_text().strip()
    except OSError:
        return
    code = getattr(errno, wanted, None)
    if not isinstance(code, int):
        code = errno.EIO
    raise OSError(code, f"{os.strerror(code)} (injected at {name})")
