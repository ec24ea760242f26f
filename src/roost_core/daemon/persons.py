"""Who may speak as the user: a ``reply`` (and so an ``answer``, which is one) carries the
user's authority, and a dialog is answered only by a person (the spec's rule). A request
whose process runs inside a job's process tree (its agent's Bash tool, a command the
agent started) is an agent's, however it reached the socket: it is refused.

The kernel tells who connected (``Connection.pid``); the daemon started every worker, and a
job's agent and whatever it starts run below its worker (on Linux the worker is a child
subreaper, so a double-forked orphan stays below it too). What this cannot see: a process
an agent had started elsewhere (``at``, ``ssh localhost``), or on a system without a
subreaper (the portable platform) an orphan re-parented to init. Foreground agents run in
the user's own terminal and are not checked: the person there sees what their agent runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from roost_core import platform
from roost_core.daemon.jobs import Job
from roost_core.protocol import NOT_A_PERSON, ProtocolError

#: How far up the process tree to look: deeper chains are not an agent's tool calls.
MAX_DEPTH = 64


def ancestors(pid: int) -> Iterable[int]:
    """``pid``, its parent, its parent's parent... up to init (pid 1, not included)."""
    for _ in range(MAX_DEPTH):
        if pid <= 1:
            return
        yield pid
        parent = platform.parent_of(pid)
        if parent is None:
            return
        pid = parent


def job_running(pid: int | None, jobs: Iterable[Job]) -> Job | None:
    """The job whose worker ``pid`` runs below (or is), or None."""
    if pid is None:
        return None
    workers = {job.worker_pid: job for job in jobs if job.worker_pid is not None}
    if not workers:
        return None
    return next((workers[p] for p in ancestors(pid) if p in workers), None)


def check_a_person(pid: int | None, jobs: Iterable[Job], what: str) -> None:
    """Refuse ``what`` (``not_a_person``) when process ``pid`` runs inside a job's tree."""
    job = job_running(pid, jobs)
    if job is not None:
        raise ProtocolError(
            NOT_A_PERSON,
            f"{what} speaks as the user, and this request comes from inside job {job.id} ({job.name}): "
            "an agent's tool cannot answer a dialog or reply as the user (use roost_send to message a session)",
        )
