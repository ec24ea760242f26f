"""The daemon, assembled: each service is made here with what it uses, and the table of
routes pairs every op with the service method that does it. The services:

- :class:`~roost_core.daemon.registry.Registry`: the jobs and foreground peers, and
  their records on disk;
- :class:`~roost_core.daemon.persistence.Persistence`: the journal, what the last daemon
  left, the answers of keyed requests;
- :class:`~roost_core.daemon.workers.Workers`: worker processes and warm slots;
- :class:`~roost_core.daemon.delivery.Mailroom` and
  :class:`~roost_core.daemon.sending.SendDesk`: every agent item's path (no I/O);
- :class:`~roost_core.daemon.jobmaker.JobMaker`: new jobs and their first items;
- :class:`~roost_core.daemon.workspaces.Workspaces`: jobs' own workspaces (git worktrees);
- :class:`~roost_core.daemon.watches.Watches`, :class:`~roost_core.daemon.handback.Handback`,
  :class:`~roost_core.daemon.budget.BudgetNotices`: what sessions are told by the daemon;
- the ops: :class:`~roost_core.daemon.ops_jobs.JobOps`,
  :class:`~roost_core.daemon.ops_worker.WorkerOps`,
  :class:`~roost_core.daemon.ops_messaging.Messaging`,
  :class:`~roost_core.daemon.ops_daemon.DaemonOps`.

An op is a method that takes a connection and checked arguments and returns a result
dict or raises ``ProtocolError``; :mod:`roost_core.daemon.dispatch` does requests by the
routes, :mod:`roost_core.daemon.wire` does the socket I/O, :mod:`roost_core.daemon.server`
the daemon's life.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import anyio

from roost_core.config import Config
from roost_core.daemon import changes
from roost_core.daemon.accept import Refuser
from roost_core.daemon.agentrows import AgentRows
from roost_core.daemon.attach import Attachments
from roost_core.daemon.budget import BudgetNotices
from roost_core.daemon.budgets import Budgets
from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import Mailroom
from roost_core.daemon.dispatch import Dispatcher, Route
from roost_core.daemon.handback import Handback
from roost_core.daemon.hostset import HostSet
from roost_core.daemon.jobmaker import JobMaker
from roost_core.daemon.jobs import Job
from roost_core.daemon.liveconfig import LiveConfig
from roost_core.daemon.ops_daemon import DaemonOps
from roost_core.daemon.ops_jobs import JobOps
from roost_core.daemon.ops_messaging import Messaging
from roost_core.daemon.ops_worker import WorkerOps
from roost_core.daemon.optable import OPS
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.persistence import Persistence
from roost_core.daemon.receipts import MessageQuotes, Receipts
from roost_core.daemon.registry import Registry
from roost_core.daemon.sending import SendDesk
from roost_core.daemon.tables import PeerTables
from roost_core.daemon.tasks import Clock, Tasks, call_soon
from roost_core.daemon.tools import ToolBox
from roost_core.daemon.watch import Watchers
from roost_core.daemon.watches import Watches
from roost_core.daemon.workers import MONITOR_INTERVAL, Workers
from roost_core.daemon.workspaces import Workspaces
from roost_core.paths import Paths
from roost_core.store import JobFiles, Journal

log = logging.getLogger("roost.daemon")

#: How often job records that could not be written (a full disk) are tried again.
SAVE_RETRY_SECONDS = 1.0
#: How long a graceful stop waits for slow clients to take their last answers.
STOP_FLUSH_SECONDS = 1.0


def stop_flush_seconds() -> float:
    """``ROOST_STOP_FLUSH_SECONDS`` when set (a test holds a stop open with it)."""
    return float(os.environ.get("ROOST_STOP_FLUSH_SECONDS", STOP_FLUSH_SECONDS))


class Daemon:
    """One per user: its services, assembled (see the module docstring), and its life
    (:meth:`load`, :meth:`monitor`, :meth:`shutdown`)."""

    def __init__(self, paths: Paths, config: Config, pm: Any, *, durable: bool = True) -> None:
        self.paths = paths
        self.config = config
        self.pm = pm
        #: Every job and foreground peer by id: the dicts every service reads.
        self.jobs: dict[str, Job] = {}
        self.foreground: dict[str, ForegroundPeer] = {}
        self.connections: set[Connection] = set()
        self.stopping = anyio.Event()
        self.tasks = Tasks()
        self.clock = Clock()
        #: The user config in force, read again when its file changes.
        self.live_config = LiveConfig(paths.config_file, config)
        self.hosts = HostSet(pm)
        self.receipts = Receipts(paths.state_dir / "dead.jsonl", durable=durable, later=call_soon)
        self.refuser = Refuser()
        self.tools = ToolBox(pm, config, tuple(self.hosts.specs))
        # The logic of every item's path (no I/O): the peer tables read the dicts as they are.
        self.tables = PeerTables(self.jobs, self.foreground, pm, config, self.hosts.takes_messages)
        self.budgets = Budgets(self.jobs, pm, config)
        self.agents = AgentRows(self.tables, self.budgets, self.jobs, self.foreground)
        self.watchers = Watchers(self.agents.rows)
        self.receipts.changed = self.watchers.receipt_changed
        self.registry = Registry(self.jobs, self.foreground, JobFiles(paths.jobs_dir, durable=durable), self.watchers)
        self.persistence = Persistence(paths, pm, self.registry, self.hosts, durable=durable, receipts=self.receipts)
        self.ledger = self.persistence.ledger
        self.workers = Workers(paths, config, self.registry, self.persistence, self.hosts, self.clock)
        # Starting a worker for an item is the one effect the mailroom asks for.
        self.mailroom = Mailroom(self.receipts, MessageQuotes(), self.workers.try_start_worker)
        self.mailroom.pushed = self.ledger.pushed
        self.desk = SendDesk(
            self.tables, self.budgets, self.mailroom, self.receipts, self.jobs, self.foreground, pm, config, self.clock, ids=self.ledger.ids
        )
        self.workspaces = Workspaces(paths, pm)
        self.maker = JobMaker(paths, config, pm, self.registry, self.hosts, self.workers, self.mailroom, self.budgets, self.workspaces)
        # What sessions are told by the daemon itself.
        self.watches = Watches(pm, config, self.registry, self.tables, self.desk, self.hosts, self.tasks)
        self.handback = Handback(pm, self.registry, self.tables, self.desk, self.watches, self.clock, self.tasks, self.workspaces)
        self.workers.listener = self.handback  # (made after the workers: it delivers through the mailroom)
        self.budget_notices = BudgetNotices(pm, self.registry, self.budgets, self.tables, self.desk, self.tasks)
        # The ops.
        self.job_ops = JobOps(
            paths, registry=self.registry, persistence=self.persistence, tables=self.tables, budgets=self.budgets, hosts=self.hosts,
            maker=self.maker, workers=self.workers, receipts=self.receipts, mailroom=self.mailroom, agents=self.agents, watchers=self.watchers,
            watches=self.watches, handback=self.handback,
        )
        self.worker_ops = WorkerOps(
            registry=self.registry, persistence=self.persistence, pool=self.workers.pool, mailroom=self.mailroom, tools=self.tools,
            watchers=self.watchers, watches=self.watches, handback=self.handback, budget_notices=self.budget_notices,
            tasks=self.tasks, clock=self.clock,
        )
        self.messaging = Messaging(
            paths, config, pm, registry=self.registry, tables=self.tables, budgets=self.budgets, desk=self.desk,
            receipts=self.receipts, ledger=self.ledger, unpushed=self.persistence.unpushed, tools=self.tools, hosts=self.hosts,
            watchers=self.watchers, watches=self.watches, handback=self.handback, workers=self.workers, maker=self.maker,
            tasks=self.tasks, clock=self.clock,
        )
        self.daemon_ops = DaemonOps(
            paths, config, pm, registry=self.registry, persistence=self.persistence, workers=self.workers, job_ops=self.job_ops,
            connections=self.connections, refuser=self.refuser, stopping=self.stopping, clock=self.clock, live_config=self.live_config,
        )
        self.attachments = Attachments(
            registry=self.registry, workers=self.workers, mailroom=self.mailroom, hosts=self.hosts, tools=self.tools, watchers=self.watchers,
        )
        self.messaging.attachments = self.attachments  # (made after it: it binds attached sessions)
        self.worker_ops.user_config = self.live_config.worker_view
        self.dispatcher = Dispatcher(self.routes(), self.ledger)
        self._next_retry = 0.0

    def config_services(self) -> list[Any]:
        """Every service that holds the config (its ``config``)."""
        return [self.tools, self.tables, self.budgets, self.workers, self.desk, self.maker, self.watches, self.messaging, self.daemon_ops]

    def refresh_config(self) -> None:
        """Put the user config in force again if its file changed (and can be read:
        :class:`LiveConfig`); what was worked out from the old one is worked out anew."""
        config = self.live_config.check()
        if config is None:
            return
        self.config = config
        for service in self.config_services():
            service.config = config
        # Reach decisions, tool definitions and budget answers were made with the old one.
        changes.changed()
        self.tools.forget()
        self.budgets.usage_changed()

    def routes(self) -> dict[str, Route]:
        """Every op of ``OPS`` with the service method that does it: the one table every
        request is done by, built once."""
        jobs, worker, messaging, daemon = self.job_ops, self.worker_ops, self.messaging, self.daemon_ops
        # Ops that make a job or say what the daemon runs with read the config file as it
        # is now (other ops see a change within a monitor pass).
        fresh = self.refresh_config
        routes = [
            Route("daemon_status", OPS["daemon_status"], daemon.op_daemon_status, before=fresh),
            Route("daemon_reload", OPS["daemon_reload"], daemon.op_daemon_reload, before=fresh),
            Route("daemon_stop", OPS["daemon_stop"], daemon.op_daemon_stop),
            Route("plugins", OPS["plugins"], daemon.op_plugins, before=fresh),
            Route("tools", OPS["tools"], messaging.op_tools),
            Route("test_clock", OPS["test_clock"], daemon.op_test_clock),
            Route("start", OPS["start"], jobs.op_start, before=fresh),
            Route("jobs", OPS["jobs"], jobs.op_jobs),
            Route("agents", OPS["agents"], jobs.op_agents),
            Route("watch", OPS["watch"], jobs.op_watch),
            Route("dead", OPS["dead"], jobs.op_dead),
            Route("reply", OPS["reply"], jobs.op_reply),
            Route("answer", OPS["answer"], jobs.op_answer),
            Route("stop", OPS["stop"], jobs.op_stop),
            Route("remove", OPS["remove"], jobs.op_remove),
            Route("log", OPS["log"], jobs.op_log),
            Route("attach", OPS["attach"], self.attachments.op_attach),
            Route("detach", OPS["detach"], self.attachments.op_detach),
            Route("worker_hello", OPS["worker_hello"], worker.op_worker_hello, after=worker.after_hello),
            Route("warm_hello", OPS["warm_hello"], worker.op_warm_hello),
            Route("warm_ready", OPS["warm_ready"], worker.op_warm_ready),
            Route("job_status", OPS["job_status"], worker.op_job_status),
            Route("ack", OPS["ack"], worker.op_ack, accept=worker.accept_ack),
            Route("seen", OPS["seen"], worker.op_seen),
            Route("peer_register", OPS["peer_register"], messaging.op_peer_register, after=messaging.after_register),
            Route("peers", OPS["peers"], messaging.op_peers),
            Route("tool_call", OPS["tool_call"], messaging.op_tool_call, before=fresh),
            Route("spawn", OPS["spawn"], messaging.op_spawn, before=fresh),
            Route("handback", OPS["handback"], self.handback.op_handback),
            Route("send", OPS["send"], messaging.op_send, accept=messaging.accept_send),
        ]
        return {route.name: route for route in routes}

    @property
    def journal(self) -> Journal | None:
        """The journal, once :meth:`load` has read it."""
        return self.persistence.journal

    @property
    def spawner(self) -> Any:
        """Starts workers through the warm fork server (None: ``Popen``)."""
        return self.workers.spawner

    @spawner.setter
    def spawner(self, spawner: Any) -> None:
        self.workers.spawner = spawner

    def load(self) -> None:
        """Read what the last daemon left (:meth:`Persistence.load`); the mailroom buffers
        into the journal from now on."""
        self.mailroom.journal = self.persistence.load()

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Serve: background tasks go to ``tg``; workers recorded as running are checked."""
        self.tasks.tg = tg
        self.workers.reconcile()

    def peer_disconnected(self, conn: Connection) -> None:
        """A connection is gone (``daemon.wire``)."""
        self.messaging.peer_disconnected(conn)
        if conn.attaching is not None:
            self.attachments.holder_gone(conn)

    def before_output(self) -> None:
        """What must be on disk before any byte of a pass reaches a client (the wire
        layer's ``Flusher`` calls it first): the job records the pass changed and the
        dead letters it buried. A client never reads a state or a refusal that a crash
        right after would take back."""
        self.registry.write_records()
        self.receipts.write_due()

    async def monitor(self) -> None:
        """Notice worker exits, kill workers that outstay a stop, reap idle workers; write
        again what a full disk refused, start workers that could not be started."""
        while True:
            await anyio.sleep(MONITOR_INTERVAL)
            self.workers.check_all(self.clock())
            self.refresh_config()
            self.retry_writes(time.monotonic())
            self.workers.check_pool()

    def retry_writes(self, now: float) -> None:
        """Once a second at most, write again what the disk refused: job records, dead
        letters, and reports kept for want of room (routed again)."""
        handback = self.handback
        if now < self._next_retry or not (self.registry.unsaved or self.receipts.unwritten or handback.reports_to_retry):
            return
        self._next_retry = now + SAVE_RETRY_SECONDS
        if self.receipts.unwritten:
            self.receipts.flush()
        if handback.reports_to_retry:
            handback.reports_to_retry = False
            self.tasks.soon(handback.retry_all_undelivered)
        self.registry.retry_saves()

    async def shutdown(self) -> None:
        """Close every connection once its last answers are written (a second at most,
        or ``ROOST_STOP_FLUSH_SECONDS``)."""
        self.registry.write_records()
        for conn in list(self.connections):
            conn.close()
        with anyio.move_on_after(stop_flush_seconds()):
            for conn in list(self.connections):
                await conn.flushed.wait()
        for conn in list(self.connections):
            conn.abort()  # a client that does not read its last answers is not waited for
        self.receipts.flush()  # letters buried in the last pass of the loop
        self.registry.write_records()  # records changed since (answers cut short by the stop)
        journal = self.journal
        if journal is not None:
            await journal.aclose()
            if journal.healthy:
                self.persistence.mark_clean_stop()
        self.workers.exits.close()
        if self.workers.spawner is not None:
            # Its workers keep running; the next daemon finds them by pid and create time.
            await self.workers.spawner.aclose()
