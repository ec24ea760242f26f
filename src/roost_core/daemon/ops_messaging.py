"""Ops for agent messaging: foreground peers (``peer_register``), ``peers``, ``send``,
``spawn`` and the agent tools (``tools``, ``tool_call``), all bound to the calling
connection: the sender is never an argument."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from roost_core import identity, locks, policy
from roost_core.config import Config
from roost_core.daemon import changes, dialognotices
from roost_core.daemon.budgets import Budgets
from roost_core.daemon.callers import chain_of_caller, sender_info
from roost_core.daemon.connection import Connection
from roost_core.daemon.delivery import HeldPush, Pending, settle
from roost_core.daemon.handback import Handback
from roost_core.daemon.hostset import HostSet
from roost_core.daemon.jobmaker import JobMaker, check_session_path
from roost_core.daemon.jobs import Job
from roost_core.daemon.ledger import AnswerLedger
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.receipts import Receipts
from roost_core.daemon.registry import Registry
from roost_core.daemon.sending import SendDesk
from roost_core.daemon.tables import PeerTables
from roost_core.daemon.tasks import Clock, Tasks
from roost_core.daemon.tools import CallerServices, ToolBox, run_tool, tool_call
from roost_core.daemon.watch import Watchers
from roost_core.daemon.watches import Watches
from roost_core.daemon.workers import Workers
from roost_core.envelope_rules import NO_USER_AUTHORITY
from roost_core.paths import Paths
from roost_core.protocol import (
    BAD_ARGS,
    CONFLICT,
    NO_HOST,
    NOT_FOUND,
    UNAUTHORIZED,
    ProtocolError,
    decode_answer,
    encode,
)
from roost_core.queue import Item
from roost_core.records import (
    PeerInfo,
    SpawnRequest,
    ToolResult,
)
from roost_core.transcript import read_entries


class Messaging:
    """The ops of agent messaging (see the module docstring)."""

    def __init__(
        self,
        paths: Paths,
        config: Config,
        pm: Any,
        *,
        registry: Registry,
        tables: PeerTables,
        budgets: Budgets,
        desk: SendDesk,
        receipts: Receipts,
        ledger: AnswerLedger,
        unpushed: dict[str, list[tuple[Any, dict[str, Any]]]],
        tools: ToolBox,
        hosts: HostSet,
        watchers: Watchers,
        watches: Watches,
        handback: Handback,
        workers: Workers,
        maker: JobMaker,
        tasks: Tasks,
        clock: Clock,
    ) -> None:
        self.paths = paths
        self.config = config
        self.pm = pm
        self.registry = registry
        self.jobs = registry.jobs
        self.foreground = registry.foreground
        self.tables = tables
        self.budgets = budgets
        self.desk = desk
        self.receipts = receipts
        self.ledger = ledger
        #: Keyed sends to foreground peers that the last daemon answered ``delivered`` and
        #: no peer acked: peer id -> (ledger slot, deliver event), pushed again when the
        #: peer registers (it drops one it holds by its message id).
        self.unpushed = unpushed
        self.tools = tools
        self.hosts = hosts
        self.watchers = watchers
        self.watches = watches
        self.handback = handback
        self.workers = workers
        self.maker = maker
        self.tasks = tasks
        self.clock = clock
        #: Binds a ``peer_register`` with ``roost attach``'s token to its job (set when the
        #: daemon is assembled: ``daemon.attach.Attachments``).
        self.attachments: Any = None

    async def op_tools(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """The agent tools, and the notice every agent item ends with (an extension gives a
        run of agent messages in one model request one notice: ``envelope_rules.one_notice``)."""
        return {"tools": self.tools.listed(), "notice": NO_USER_AUTHORITY}

    async def op_tool_call(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        """Run an agent tool for a bound session: its declaration's ``run`` (see
        :mod:`roost_core.daemon.tools`), then the text the model reads (tools plugin). A
        refused call is a normal, failed tool result."""
        name, params = args["name"], args["args"]
        if conn.job is not None and "hops" in args:
            # The worker's run took in items further down the chain since it started.
            conn.job.run_hops = max(conn.job.run_hops, args["hops"])
        if conn.job is not None and args.get("broadcastChain"):
            conn.job.run_broadcast_chain = True
        tool = self.tools.by_name().get(name)
        if tool is None:
            raise ProtocolError(NOT_FOUND, f"no agent tool {name!r}")
        try:
            call = tool_call(tool, sender_info(self.tables, conn), params, CallerServices(self, conn, args.get("key"), args.get("again", False)))
            data = await run_tool(tool, call)
            # Plugins get data of their own: an op's result may hold rows the daemon keeps.
            copied = decode_answer(encode(data))
            if isinstance(copied, ProtocolError):
                raise copied
            result = ToolResult(tool=name, ok=True, data=copied)
        except ProtocolError as exc:
            result = ToolResult(tool=name, ok=False, code=exc.code, message=exc.message)
        return {"ok": result.ok, "text": policy.format_tool_result(self.pm, result), "data": result.data, "code": result.code}

    async def op_peer_register(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        if "attach" in args and self.attachments is not None:
            # An attached job's interactive session: the job itself, not a new peer.
            return dict(self.attachments.bind(conn, args))
        if conn.job is not None:
            raise ProtocolError(CONFLICT, "a worker connection cannot register as a foreground peer")
        pid = args["pid"]
        session = args.get("session")
        if not locks.is_alive(pid):
            raise ProtocolError(UNAUTHORIZED, f"pid {pid} is not a live process")
        if locks.owner_uid(pid) != conn.uid:
            raise ProtocolError(UNAUTHORIZED, f"pid {pid} is not a process of this user")
        if not locks.is_descendant(conn.pid, pid):
            raise ProtocolError(UNAUTHORIZED, "the connecting process is not that pid or one of its descendants")
        session_id = args.get("sessionId")
        if session is not None:
            session = check_session_path(session)
            holder = locks.lock_holder(session)
            if holder != pid:
                raise ProtocolError(UNAUTHORIZED, "the writer lock of that session does not name that pid")
            if not session_id:
                header = next((e for e in read_entries(session) if e.get("type") == "session"), None)
                session_id = header.get("id") if header else None
            peer_id = identity.foreground_id(session_id or session)
        elif session_id:
            # A no-session peer names itself by a random id of its own, so it keeps its
            # peer id across reconnects; a live peer of another pid keeps its id.
            peer_id = identity.foreground_id(session_id)
            taken = self.foreground.get(peer_id)
            if taken is not None and taken.connected and taken.pid != pid and locks.is_alive(taken.pid):
                raise ProtocolError(CONFLICT, f"peer id {peer_id} belongs to another live session")
        else:
            existing = conn.peer.id if conn.peer is not None and conn.peer.session is None else None
            peer_id = existing or identity.foreground_id(None)
        if peer_id in self.jobs:
            raise ProtocolError(CONFLICT, f"peer id {peer_id} is taken")
        name = policy.sanitize_name(self.pm, args.get("name") or Path(session or "foreground").stem)
        peer = self.foreground.get(peer_id)
        if peer is not None and peer.conn is not None and peer.conn is not conn:
            old = peer.conn
            old.peer = None
            old.send({"event": "replaced", "by": conn.number})
        if conn.peer is not None and conn.peer.id != peer_id:
            conn.peer.conn = None
        if peer is None:
            peer = ForegroundPeer(id=peer_id, name=name, session=session, cwd=args.get("cwd"), pid=pid)
            self.foreground[peer_id] = peer
            changes.changed()
        peer.name, peer.session, peer.cwd, peer.pid = name, session, args.get("cwd"), pid
        # Number what this peer gets after what it holds (a new daemon starts at 0).
        peer.seq = max(peer.seq, args.get("lastSeq") or 0)
        peer.host = args.get("host") if args.get("host") in self.hosts else None
        conn.registered_again = peer.conn is conn and conn.peer is peer
        peer.conn = conn
        conn.peer = peer
        self.watchers.touch()
        dialognotices.tell_joined(self.jobs, peer)
        return {
            "id": peer.id,
            "name": peer.name,
            "tools": self.tools.listed(),
        }

    def after_register(self, conn: Connection) -> None:
        """Push again what a previous connection of this peer had not acked (an attached
        job's session: what waits in the job's queue)."""
        if conn.job is not None and self.attachments is not None:
            self.attachments.after_bind(conn)
            return
        peer = conn.peer
        if peer is not None and conn.registered_again:
            # Its items in flight went out on this connection already, in order.
            self.tasks.soon(lambda: self.handback.retry_undelivered(session=peer.session, peer_id=peer.id))
            return
        if peer is not None:
            # Everything in flight is pushed now, in order: nothing waits behind a held push.
            peer.queued_pushes.clear()
            peer.held.clear()
            for seq in sorted(peer.in_flight):
                conn.send(peer.in_flight[seq])
            for slot, event in self.unpushed.pop(peer.id, ()):
                # Answered delivered by a daemon that died before the peer acked it:
                # pushed again, numbered for this daemon, with its own message id.
                item = Item.from_event(event)
                item.seq = peer.seq = peer.seq + 1
                line = item.encoded()
                peer.in_flight[item.seq] = line
                peer.recorded[item.seq] = slot
                conn.send(line)
            self.tasks.soon(lambda: self.handback.retry_undelivered(session=peer.session, peer_id=peer.id))

    def peer_disconnected(self, conn: Connection) -> None:
        self.watchers.discard(conn)
        self.watchers.touch()
        if conn.peer is not None and conn.peer.conn is conn:
            conn.peer.conn = None
            self.put_back_reports(conn.peer)
            # A foreground session ends with its connection: its watchers hear it, and
            # its own watches end with it.
            self.watches.ended(conn.peer)
        if conn.job is not None and conn.job.conn is conn:
            conn.job.conn = None
        if conn.warm is not None and conn.warm.conn is conn:
            conn.warm.conn = None

    def put_back_reports(self, peer: ForegroundPeer) -> None:
        """The peer's connection ended with reports it had not acked: each goes back to its
        child, kept in the child's record (a daemon restart keeps it), and is routed
        again when the parent session registers (with its own message id, which the
        parent's side skips if it holds it already)."""
        for seq, (child_id, report) in sorted(peer.reports_in_flight.items()):
            peer.in_flight.pop(seq, None)
            child = self.jobs.get(child_id)
            if child is None or child.undelivered_report is not None:
                continue  # removed since, or it keeps a newer report
            child.undelivered_report = report
            self.registry.kept_reports[child.id] = None
            self.registry.save(child)
        peer.reports_in_flight.clear()

    async def op_peers(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        sender = sender_info(self.tables, conn)
        listed = self.tables.listed_for(sender)
        watch = self.watches.add_watch(conn, sender, args["watch"]) if args.get("watch") else None
        return {
            "self": {"id": sender.id, "name": sender.name},
            "peers": listed,
            "sent": self.receipts.sent_by(sender.id),
            "sentCounts": self.receipts.tally(sender.id),
            "watch": watch,
        }

    async def op_send(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        return await settle(self.accept_send(conn, args))

    def accept_send(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any] | Pending | HeldPush:
        """``send`` with no wait: everything up to the journal now, the result once the
        item is durable (so a client's pipelined sends share one commit). The op's logic
        is the send desk's (:class:`~roost_core.daemon.sending.SendDesk`, no I/O)."""
        return self.desk.send(sender_info(self.tables, conn), conn.job, args)

    async def op_spawn(self, conn: Connection, args: dict[str, Any], *, via_tool: bool = False) -> dict[str, Any]:
        """Start a child job of the calling session, linked into its tree. Through the
        ``roost_spawn`` tool (``via_tool``) a ``host`` is the agent's choice, which the
        limits plugin checks against ``agentSpawnHosts``."""
        sender = sender_info(self.tables, conn)
        request_key = self.maker.request_key(conn, args)
        made = await self.maker.job_of_request(request_key)
        if made is not None:
            return {"id": made.id, "name": made.name, "report": "a report will arrive by itself when it finishes", "workspace": made.workspace}
        self.budgets.check(sender)
        parent_job = conn.job if conn.job is not None else self.tables.tree_record(sender.session)
        own_host = conn.job.host if conn.job is not None else conn.peer.host if conn.peer is not None else None
        # A spawner without a host of its own (the Python foreground API) gets the stand-in
        # (roost's scripted host) it always had; `roost start` is stricter
        # (JobMaker.default_host).
        host = args.get("host") or own_host or self.config.default_host or self.hosts.stand_in()
        if host is None:
            raise ProtocolError(NO_HOST, "spawn: no host named, no defaultHost, and no host plugin is a stand-in: name one")
        self.hosts.check(host, "spawn")
        cwd = args.get("cwd") or sender.cwd or str(self.paths.home)
        if not os.path.isabs(cwd) or not Path(cwd).is_dir():
            raise ProtocolError(BAD_ARGS, f"spawn: cwd {cwd!r} is not an existing absolute directory")
        model = args.get("model") or (conn.job.model if conn.job is not None else None)
        thinking = args.get("thinking") or (conn.job.thinking if conn.job is not None else None)
        parent_scenario = conn.job.scenario if conn.job is not None else None
        scenario = self.hosts.scenario(host, args.get("scenario"), cwd, (parent_scenario, model))
        root = sender.root_session or sender.session or f"peer:{sender.id}"
        depth = (parent_job.depth if parent_job is not None else 0) + 1
        trace, hops = chain_of_caller(conn)
        request = SpawnRequest(
            parent=sender,
            depth=depth,
            live_children=sum(1 for j in self.jobs.values() if j.has_worker and self.is_child_of(j, sender)),
            live_in_tree=sum(1 for j in self.jobs.values() if j.has_worker and j.tree == root),
            live_spawned=sum(1 for j in self.jobs.values() if j.has_worker and j.spawned),
            tree=root,
            hops=hops + 1,
            host=args.get("host") if via_tool else None,
        )
        refusal = policy.check_spawn(self.pm, request, self.clock(), self.config)
        if refusal is not None:
            raise ProtocolError(refusal.code, refusal.message)
        # The rule `start` keeps: a chosen name that is taken is refused (name_taken,
        # naming a free one), so the model never holds a name that finds two jobs.
        name = self.maker.job_name(args.get("name"), args["task"])
        workspace = await self.maker.workspaces.make(args.get("workspace") or self.config.agent_workspace, args.get("base"), cwd, name)
        job = self.maker.create_job(
            task=args["task"],
            name=name,
            cwd=workspace.cwd if workspace is not None else cwd,
            host=host,
            # A warm worker is made for a folder, and a new workspace's folder is new.
            slot=self.workers.take_slot(host, cwd, model, thinking) if workspace is None else None,
            scenario=scenario,
            model=model,
            thinking=thinking,
            parent_session=sender.session,
            parent_peer=sender.id,
            root_session=root,
            depth=depth,
            spawned=True,
        )
        job.request_key = request_key
        job.workspace = workspace.to_json() if workspace is not None else None
        with self.workers.slot_released_on_error(job), self.maker.workspace_dropped_on_error(job, workspace):
            self.maker.add_job(job)
            policy.note_spawned(self.pm, request, self.clock())
            await self.maker.enqueue_task(job, args["task"], trace=trace or f"t-{job.id}-1", hops=hops + 1)
        return {"id": job.id, "name": job.name, "report": "a report will arrive by itself when it finishes", "workspace": job.workspace}

    def is_child_of(self, job: Job, parent: PeerInfo) -> bool:
        if parent.session is not None and job.parent_session == parent.session:
            return True
        return job.parent_peer == parent.id



