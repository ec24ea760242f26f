"""Watches: a session asks (``roost_agents`` with ``watch``) to be told once when a peer
settles a run, asks a question or ends, so it never polls. The watch plugin
(``roost_decide_watch``) allows or refuses; the core keeps the watch on the watched record
(a job's survives a daemon restart), fires it once with a ``notice`` item, and drops it when
the watcher ends (stopped, removed, or a foreground session gone)."""

from __future__ import annotations

import time
from typing import Any

from roost_core import policy, routing
from roost_core.config import Config
from roost_core.daemon.callers import chain_of_caller
from roost_core.daemon.connection import Connection
from roost_core.daemon.hostset import HostSet
from roost_core.daemon.jobs import Job
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.registry import Registry
from roost_core.daemon.sending import SendDesk, deliver_to
from roost_core.daemon.tables import PeerTables
from roost_core.daemon.tasks import Tasks
from roost_core.names import shown
from roost_core.protocol import ProtocolError
from roost_core.records import OutgoingItem, PeerInfo, WatchRequest

#: Job states in which a watch has nothing to wait for.
SETTLED = ("idle", "needs_input", "done", "failed", "stopped")


class Watches:
    """The watches sessions keep on each other (see the module docstring)."""

    def __init__(self, pm: Any, config: Config, registry: Registry, tables: PeerTables, desk: SendDesk, hosts: HostSet, tasks: Tasks) -> None:
        self.pm = pm
        self.config = config
        self.registry = registry
        self.tables = tables
        self.desk = desk
        self.hosts = hosts
        self.tasks = tasks

    def watch_records(self) -> list[Job | ForegroundPeer]:
        return [*self.registry.jobs.values(), *self.registry.foreground.values()]

    def watches_of(self, watcher_id: str) -> int:
        return sum(1 for record in self.watch_records() for watch in record.watchers if watch.get("watcher") == watcher_id)

    def add_watch(self, conn: Connection, sender: PeerInfo, ref: str) -> dict[str, Any]:
        """Watch ``ref`` for the calling session; what the model is told back."""
        tables = self.tables
        target, addressed_by = routing.resolve_target(ref, tables.peer_table(), lambda peer: tables.reach(sender, peer, "name").allowed)
        if target.id == sender.id or (sender.session is not None and target.session == sender.session):
            raise ProtocolError("self_send", "cannot watch yourself")
        decision = tables.reach(sender, target, addressed_by)
        if not decision.allowed:
            raise ProtocolError("unreachable", decision.reason or f"peer {target.id} is not reachable")
        row = {"id": target.id, "name": target.name, "relation": decision.relation}
        record: Job | ForegroundPeer | None = self.registry.jobs.get(target.id) if target.kind == "job" else self.registry.foreground.get(target.id)
        if record is None or (isinstance(record, Job) and ((record.state in SETTLED and not record.dialog) or not record.has_worker)):
            # Nothing is under way: say how it stands instead of waiting for what will not come.
            state = target.state if record is None or record.has_worker else f"{target.state}, not running"
            return {**row, "result": "settled", "state": state}
        if isinstance(record, Job) and record.dialog:
            return {**row, "result": "asking", "state": target.state, "question": target.question}
        trace, hops = chain_of_caller(conn)
        request = WatchRequest(watcher=sender, target=target, relation=decision.relation, active=self.watches_of(sender.id), hops=hops + 1)
        verdict = policy.decide_watch(self.pm, request, self.config)
        if not verdict.allowed:
            refusal = verdict.refusal
            raise ProtocolError(refusal.code if refusal else "unreachable", refusal.message if refusal else "watch refused")
        if not any(watch.get("watcher") == sender.id for watch in record.watchers):
            record.watchers.append(
                {"watcher": sender.id, "relation": decision.relation, "trace": trace, "hops": hops + 1, "since": time.time()}
            )
            if isinstance(record, Job):
                self.registry.save(record)
        return {**row, "result": "watching", "state": target.state}

    def fire(self, record: Job | ForegroundPeer, event: str) -> None:
        """``record`` settled, asks or ended: tell each watcher once, then forget them."""
        if not record.watchers:
            return
        watchers, record.watchers = record.watchers, []
        if isinstance(record, Job):
            self.registry.save(record)
            info = record.peer_info(accepts_messages=self.hosts.takes_messages(record))
        else:
            info = record.peer_info()
        self.tasks.soon(self.tell_watchers, info, event, watchers)

    async def tell_watchers(self, peer: PeerInfo, event: str, watchers: list[dict[str, Any]]) -> None:
        lines = [f"{shown(peer.name)} ({peer.id}) {event}: state {peer.state}"]
        if peer.question:
            lines.append(f"question: {peer.question}")
        elif peer.summary:
            lines.append(f"summary: {peer.summary}")
        lines.append("This watch has fired and is over.")
        text = "\n".join(lines)
        table = self.tables.peer_table()
        job = self.registry.jobs.get(peer.id) if peer.kind == "job" else None
        for watch in watchers:
            watcher = table.holder_of(str(watch.get("watcher")))
            if watcher is None:
                continue
            # A notice continues the chain of what the watched peer did.
            hops = max(int(watch.get("hops") or 0), job.run_hops + 1 if job else 0)
            item = OutgoingItem(sender=peer, target=watcher, text=text, kind="notice", relation=str(watch.get("relation") or "tree"), hops=hops)
            try:
                await deliver_to(self.desk, watcher, item, policy.frame_item(self.pm, item), trace=job.run_trace if job else watch.get("trace"))
            except ProtocolError:
                pass  # the watcher's queue is full: a notice is not worth a dead letter more

    def drop_watches_of(self, watcher_id: str) -> None:
        """The watcher ended: its watches end with it."""
        for record in self.watch_records():
            kept = [watch for watch in record.watchers if watch.get("watcher") != watcher_id]
            if len(kept) != len(record.watchers):
                record.watchers = kept
                if isinstance(record, Job):
                    self.registry.save(record)

    def ended(self, record: Job | ForegroundPeer) -> None:
        """``record``'s session ended (stopped, removed, gone): its watchers hear it, and
        its own watches end with it."""
        self.fire(record, "ended")
        self.drop_watches_of(record.id)
