"""The ops of a job's worker process (and of a warm one waiting for a job): hello, its
status, its ack; and a foreground peer's ack."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import Any

from roost_core.daemon.budget import BudgetNotices
from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import Mailroom, Pending, settle
from roost_core.daemon.handback import Handback
from roost_core.daemon.persistence import Persistence
from roost_core.daemon.pool import WarmPool
from roost_core.daemon.registry import Registry
from roost_core.daemon.tasks import Clock, Tasks
from roost_core.daemon.tools import ToolBox
from roost_core.daemon.watch import Watchers
from roost_core.daemon.watches import Watches
from roost_core.dialogs import clean_options
from roost_core.protocol import CONFLICT, UNAUTHORIZED, ProtocolError

log = logging.getLogger("roost.daemon")


class WorkerOps:
    """A worker's ops (see the module docstring), and ``ack``, which foreground peers
    call too."""

    def __init__(
        self,
        *,
        registry: Registry,
        persistence: Persistence,
        pool: WarmPool,
        mailroom: Mailroom,
        tools: ToolBox,
        watchers: Watchers,
        watches: Watches,
        handback: Handback,
        budget_notices: BudgetNotices,
        tasks: Tasks,
        clock: Clock,
    ) -> None:
        self.registry = registry
        self.persistence = persistence
        self.pool = pool
        self.mailroom = mailroom
        self.tools = tools
        self.watchers = watchers
        self.watches = watches
        self.handback = handback
        self.budget_notices = budget_notices
        self.tasks = tasks
        self.clock = clock
        #: The user config a worker takes in its hello (the daemon's, never the file:
        #: ``LiveConfig.worker_view``; set by the daemon that assembles this).
        self.user_config: Callable[[], dict[str, Any]] = dict

    async def op_worker_hello(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = self.registry.jobs.get(args["job"])
        if job is None or not hmac.compare_digest(job.token.encode(), args["token"].encode()):
            raise ProtocolError(UNAUTHORIZED, "bad job token")
        if conn.bound:
            raise ProtocolError(CONFLICT, "connection is already bound")
        if job.worker_pid is None or conn.pid != job.worker_pid:
            # With the job's token, this is a worker started for the job that the job no
            # longer has (its daemon died before the record named it): refused, it ends
            # at once with what it started.
            log.warning("refused worker process %s of %s (the job's worker is %s); it ends", conn.pid, job.id, job.worker_pid)
            raise ProtocolError(UNAUTHORIZED, "only the job's own worker process may say hello")
        if job.conn is not None and job.conn is not conn:
            job.conn.job = None
            job.conn.close()
        conn.job = job
        job.conn = conn
        job.write_failing = False  # a worker that still fails says so again (resync)
        if args.get("held") is not None:
            # A worker that outlived a daemon crash: seqs go on after what it holds.
            self.persistence.settle_numbering(job, args["held"])
        # Everything unacked is pushed again; the worker drops what its transcript holds.
        job.sent = job.queue.acked
        return {
            "job": {
                "id": job.id,
                "name": job.name,
                "host": job.host,
                "cwd": job.cwd,
                "session": job.session,
                "task": job.task,
                "scenario": job.scenario,
                "model": job.model,
                "thinking": job.thinking,
                "state": job.state,
                "parentSession": job.parent_session,
                "parentPeer": job.parent_peer,
            },
            "acked": job.queue.acked,
            "tools": self.tools.listed(),
            "config": self.user_config(),
        }

    async def op_warm_hello(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """A warm worker (``roost_core.daemon.pool``) checks in: the job it will be, and
        the tools its pi will have."""
        if conn.bound or conn.warm is not None:
            raise ProtocolError(CONFLICT, "connection is already bound")
        slot = self.pool.hello(conn, args["job"], args["token"], conn.pid)
        if slot is None:
            raise ProtocolError(UNAUTHORIZED, "no such warm slot for this process")
        conn.warm = slot
        return {"job": slot.info(), "tools": self.tools.listed(), "config": self.user_config()}

    async def op_warm_ready(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """The warm worker's host is up: the slot may be taken."""
        if conn.warm is None:
            raise ProtocolError(UNAUTHORIZED, "warm_ready is for a warm worker (warm_hello first)")
        self.pool.mark_ready(conn.warm)
        return {"ready": True}

    def after_hello(self, conn: Connection) -> None:
        """Once the hello answer is queued: push everything not yet in the transcript, and
        retry reports kept for this job's session (a job for it has started)."""
        if conn.job is not None:
            self.mailroom.push_pending(conn.job)
            self.tasks.soon(lambda session=conn.job.session: self.handback.retry_undelivered(session=session))

    async def op_job_status(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        job = conn.job
        assert job is not None
        if "progress" in args:
            # Shown, never saved: a sign of work is no change of the job's record (its
            # ``updated`` stays), and a worker sends one at most every second.
            job.progress = args.pop("progress")
            self.watchers.touch()
            if not args:
                return {"state": job.state}
        if args.get("state") == "running" and job.state != "running":
            job.progress = None  # a new run: its signs of work are its own
        if job.state == "stopped":
            # The user's stop wins over a status the worker sent before it heard of it;
            # a job stopped when it had failed keeps that failure's error.
            held = ("state", "dialog", "dialogOptions", "error") if job.stopped_from == "failed" else ("state", "dialog", "dialogOptions")
            args = {key: value for key, value in args.items() if key not in held}
        for key in ("state", "status", "summary", "question", "error"):
            if key in args:
                setattr(job, key, args[key])
        if "dialogOptions" in args:
            options = args["dialogOptions"]
            job.dialog_options = clean_options(options) if options else None
        if "dialog" in args:
            asking = bool(args["dialog"]) and not job.dialog
            job.dialog = bool(args["dialog"])
            if not job.dialog:
                job.dialog_options = None
            if asking:
                self.watches.fire(job, "asks")
        if "trace" in args:
            job.run_trace = args["trace"]
        if "hops" in args:
            job.run_hops = args["hops"]
        if "broadcastChain" in args:
            job.run_broadcast_chain = args["broadcastChain"]
        if "causes" in args:
            job.run_causes = [c for c in args["causes"] if isinstance(c, dict) and isinstance(c.get("seq"), int)]
        if "hostPid" in args:
            job.host_pid = args["hostPid"]
        if "writeFailing" in args:
            job.write_failing = args["writeFailing"]
        if "background" in args and (args["background"], args.get("backgroundShown") or []) != (job.background, job.background_shown):
            job.background = args["background"]
            job.background_shown = [{"pid": e["pid"], "command": e["command"]} for e in args.get("backgroundShown") or ()]
        if "state" in args and args["state"] != "failed" and "error" not in args:
            job.error = None
        if args.get("settled"):
            job.crashes = 0
        if job.state != "running" and "state" in args:
            job.idle_since = self.clock()
        if "usage" in args:
            self.budget_notices.note_usage(job, args["usage"])
        self.registry.save(job)
        return {"state": job.state}

    async def op_ack(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        return await settle(self.accept_ack(conn, args))

    def accept_ack(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any] | Pending:
        """``ack`` with no wait: a worker's ack is answered once its record is durable."""
        if conn.job is not None:
            answer = self.mailroom.ack_job(conn.job, args["seq"])
            if isinstance(answer, Pending):
                self.watchers.touch()
            return answer
        if conn.peer is not None:
            return self.mailroom.ack_peer(conn.peer, args["seq"])
        raise ProtocolError(UNAUTHORIZED, "ack needs a bound connection")

    async def op_seen(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """The receiving model had the items ``seqs`` (of this worker's job, or this
        foreground peer) in a model request: their senders' receipts say ``seen``."""
        receiver = conn.job if conn.job is not None else conn.peer
        if receiver is None:
            raise ProtocolError(UNAUTHORIZED, "seen needs a bound connection")
        return {"seen": self.mailroom.receipts.saw(receiver.id, args["seqs"])}

