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


def point(name: str) -> None:
    wanted = os.environ.get("ROOST_FAULTS")
    if not wanted or name not in wanted.split(","):
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
