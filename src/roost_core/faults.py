"""Named crash points for the reliability suite.

Points: ``daemon.after_accept_before_persist``, ``daemon.after_persist_before_answer``,
``daemon.during_handback``, ``daemon.report_routing``, ``store.during_atomic_write``,
``worker.after_steer_before_message_end``, ``worker.after_message_end_before_ack``,
``worker.before_handback``.

``ROOST_FAULTS=name[,name...]`` makes the process SIGKILL itself the first time it reaches
a named point; a marker file under ``$ROOST_HOME/faults`` makes each fire only once, so
the restarted process gets past it. Unset (always, outside tests) it costs one lookup.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


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
