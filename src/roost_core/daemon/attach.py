"""Attach (``roost attach JOB``): a job's session opened in its own CLI's interactive
interface in the user's terminal, as the same peer.

The mechanism, in the daemon:

1. ``attach`` (from ``roost attach``, a person's process): the job's host must declare how
   it attaches (``HostSpec.attach``), and nobody else may hold it. The job gets an
   :class:`Attachment` (the holder's connection and pid, a one-time token); its worker is
   told to end (``shutdown`` with reason ``attach``; ``interrupt`` for ``--now``): it
   finishes its run (or interrupts it the CLI's own way), hands it back as always, closes
   its host, lets go of the session file and exits. The op answers once the worker is
   gone, with what ``roost attach`` needs to open the session and the token.
2. While attached no worker is started for the job (:meth:`Attachments.holds`): what
   arrives for it is queued as for a job whose worker is starting.
3. The interactive CLI's roost side (pi's extension, ``roost mcp``) registers with
   ``peer_register`` and the token: the connection is bound as the job's own
   (``conn.job``), as a worker's is. Items of the job's queue are pushed to it and its
   acks go into the job's queue; its tool calls, ``handback`` and ``job_status`` are the
   job's. So it is the same peer (id, name, relations, tree, budget).
4. ``detach``, or the holder's connection closing, ends the attachment: the job goes back
   to the background, and a worker starts for what waits (it reopens the session file and
   drops what the transcript holds already: nothing lost, nothing twice).
"""

from __future__ import annotations

import hmac
import secrets
import time
from typing import Any

import anyio
import attrs

from roost_core import locks
from roost_core.daemon import changes
from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import Mailroom
from roost_core.daemon.hostset import HostSet
from roost_core.daemon.jobs import Job
from roost_core.daemon.persons import check_a_person
from roost_core.daemon.registry import Registry
from roost_core.daemon.tools import ToolBox
from roost_core.daemon.watch import Watchers
from roost_core.daemon.workers import Workers
from roost_core.protocol import (
    ATTACHED_ELSEWHERE,
    CONFLICT,
    NOT_ATTACHABLE,
    NOT_INTERRUPTIBLE,
    UNAUTHORIZED,
    ProtocolError,
)


@attrs.define(eq=False)
class Attachment:
    """A job held by one ``roost attach``: its connection (the attachment ends with it),
    its pid (the interactive CLI runs under it), the token its CLI registers with, and the
    connection of that CLI's roost side once it has registered."""

    holder: Connection
    pid: int
    token: str
    since: float = attrs.field(factory=time.time)
    session_conn: Connection | None = None
    #: Set once the job's worker is gone (or there was none).
    released: anyio.Event = attrs.field(factory=anyio.Event)

    def shown(self) -> dict[str, Any]:
        """What rows show (never the token)."""
        return {"pid": self.pid, "since": self.since, "connected": self.session_conn is not None and not self.session_conn.closed}


class Attachments:
    """The ``attach`` and ``detach`` ops, and the binding of an attached session's
    registration to its job (see the module docstring)."""

    def __init__(self, *, registry: Registry, workers: Workers, mailroom: Mailroom, hosts: HostSet, tools: ToolBox, watchers: Watchers) -> None:
        self.registry = registry
        self.jobs = registry.jobs
        self.workers = workers
        self.mailroom = mailroom
        self.hosts = hosts
        self.tools = tools
        self.watchers = watchers

    async def op_attach(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.registry.job_by_ref(args["job"])
        check_a_person(conn.pid, self.jobs.values(), "attach")
        if conn.bound or conn.attaching is not None:
            raise ProtocolError(CONFLICT, "this connection is bound already; roost attach uses a connection of its own")
        spec = self.hosts.get(job.host)
        if spec is None or spec.attach is None:
            raise ProtocolError(NOT_ATTACHABLE, f"{job.name} ({job.id}) runs on host {job.host!r}, which has no interactive interface to attach to")
        held = job.attach
        if held is not None:
            raise ProtocolError(
                ATTACHED_ELSEWHERE,
                f"{job.name} ({job.id}) is attached already, by roost attach pid {held.pid} since {time.strftime('%H:%M:%S', time.localtime(held.since))}",
            )
        now = bool(args.get("now"))
        if now and job.state == "running" and not spec.attach_interrupts:
            raise ProtocolError(NOT_INTERRUPTIBLE, f"host {job.host!r} cannot interrupt a run: attach without --now waits for it to settle")
        attachment = Attachment(holder=conn, pid=conn.pid, token=secrets.token_hex(16))
        job.attach = attachment
        conn.attaching = job
        changes.changed()
        self.watchers.touch()
        if job.worker_pid is None:
            attachment.released.set()
        elif job.conn is not None:
            # The worker ends after its run (or interrupts it): it hands the run back as
            # always, then lets go of the session file.
            job.conn.send({"event": "shutdown", "reason": "attach", "interrupt": now})
        else:
            # Not connected (reconnecting): ended as a stop ends it, so the session is free.
            self.workers.shut_down(job, "attach")
        await attachment.released.wait()
        if job.attach is not attachment:
            raise ProtocolError(CONFLICT, "the attachment ended before the job's worker let go of the session")
        return {
            "job": {
                "id": job.id,
                "name": job.name,
                "host": job.host,
                "cwd": job.cwd,
                "session": job.session,
                "task": job.task,
                "model": job.model,
                "thinking": job.thinking,
            },
            "token": attachment.token,
            "state": job.state,
        }

    async def op_detach(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.registry.job_by_ref(args["job"])
        if job.attach is None or job.attach.holder is not conn:
            raise ProtocolError(CONFLICT, f"{job.name} ({job.id}) is not attached by this connection")
        self.release(job)
        return {"id": job.id, "state": job.state, "pending": len(job.queue.items)}

    def holder_gone(self, conn: Connection) -> None:
        """The ``roost attach`` connection closed: its attachment ends."""
        job = conn.attaching
        conn.attaching = None
        if job is not None and job.attach is not None and job.attach.holder is conn:
            self.release(job)

    def release(self, job: Job) -> None:
        """End ``job``'s attachment: its session's connection no longer speaks for it, and
        a worker starts for what waits (it reopens the session file)."""
        attachment, job.attach = job.attach, None
        if attachment is None:
            return
        attachment.holder.attaching = None
        attachment.released.set()
        session = attachment.session_conn
        if session is not None and job.conn is session:
            job.conn = None
            session.job = None
            session.close()
        if job.state == "running":
            # A run of the interactive session that its exit cut short: it is not run again.
            job.state = "idle"
        job.dialog = False
        job.dialog_options = None
        self.registry.save(job)
        changes.changed()
        self.watchers.touch()
        if job.queue.items and job.state != "stopped" and job.worker_pid is None:
            self.workers.try_start_worker(job)

    def bind(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """``peer_register`` with an attach token: the connection becomes the attached job's
        own (the same peer), if the token is the job's, the registering process runs under
        that ``roost attach``, and a session it names is the job's."""
        token = args["attach"]
        job = next((j for j in self.jobs.values() if j.attach is not None and hmac.compare_digest(j.attach.token.encode(), token.encode())), None)
        if job is None or job.attach is None:
            raise ProtocolError(UNAUTHORIZED, "no job is attached with that token (the roost attach that made it has ended)")
        attachment = job.attach
        pid = args["pid"]
        if not locks.is_descendant(conn.pid, pid) or not locks.is_descendant(pid, attachment.pid):
            raise ProtocolError(UNAUTHORIZED, "an attached session must run under the roost attach that holds the job")
        session = args.get("session")
        if session is not None and not same_file(session, job.session):
            raise ProtocolError(UNAUTHORIZED, f"the attached session is {job.session}, not {session}")
        if conn.peer is not None:
            raise ProtocolError(CONFLICT, "this connection is registered as a foreground peer already")
        old = attachment.session_conn
        if old is not None and old is not conn and job.conn is old:
            old.job = None
            old.send({"event": "replaced", "by": conn.number})
        conn.job = job
        job.conn = conn
        attachment.session_conn = conn
        # Everything not yet acked goes to it; its session drops what it holds.
        job.sent = job.queue.acked
        changes.changed()
        self.watchers.touch()
        return {"id": job.id, "name": job.name, "tools": self.tools.listed(), "attached": True}

    def after_bind(self, conn: Connection) -> None:
        """Push what waits for the attached job."""
        if conn.job is not None:
            self.mailroom.push_pending(conn.job)


def same_file(a: str, b: str) -> bool:
    import os

    return os.path.realpath(a) == os.path.realpath(b)
