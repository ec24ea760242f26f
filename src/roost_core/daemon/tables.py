"""The daemon's peer tables: every job record and foreground peer collapsed by session
(``routing.collapse``), each record's :class:`~roost_core.records.PeerInfo`, the newest
job of each session, the ``peers`` listing, and the reach decisions, routes and listings
worked out from them. The tables are kept until the next change
(:mod:`~roost_core.daemon.changes`) and made again from the daemon's records then; what
reach decisions make (decisions, routes, listings) is kept with them only while every
reach plugin declares its decision pure (``roost_core.pure``), and otherwise made again at
every send and every listing, so a policy that reads the world is right at once.

No I/O and no daemon: :class:`PeerTables` reads the daemon's ``jobs`` and ``foreground``
dicts (the same objects the daemon changes, never copies) and asks the plugins through
the plugin set's compiled hooks (:class:`~roost_core.policy.PluginHooks`, kept here and
shared with the send desk), so a test builds it from records alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from roost_core import peerstate, policy, routing
from roost_core.config import Config
from roost_core.daemon import changes
from roost_core.daemon.jobs import Job
from roost_core.daemon.peers import ForegroundPeer
from roost_core.protocol import EncodedOnce
from roost_core.records import PeerInfo, ReachDecision

#: Pure reach decisions (and routes) kept between two changes of the peer table (then asked again).
MAX_REACH_CACHE = 100_000
#: Senders whose ``peers`` rows are kept between two changes of the peer table (a list
#: of references to shared rows each; past this, all are made again).
MAX_LISTINGS_KEPT = 64


class PeerTables:
    """The peer tables of one daemon, made from its records and kept between changes.

    :param jobs: the daemon's job records by id (read, never changed).
    :param foreground: the daemon's foreground peers by id (read, never changed).
    :param pm: the plugin manager reach decisions are asked of (through :attr:`hooks`).
    :param config: the config reach decisions are given.
    :param host_takes_messages: whether a job's host takes messages (a job's record says
        so as ``accepts_messages``).
    """

    def __init__(
        self,
        jobs: dict[str, Job],
        foreground: dict[str, ForegroundPeer],
        pm: Any,
        config: Config,
        host_takes_messages: Callable[[Job], bool],
    ) -> None:
        self.jobs = jobs
        self.foreground = foreground
        self.pm = pm
        self.config = config
        self.host_takes_messages = host_takes_messages
        #: The plugin set's compiled hooks: the one cache of them, the send desk's too.
        self.hooks = policy.PluginHooks(pm)
        # The tables, built by _build at one generation of changes.
        self._generation = -1
        #: The compiled hooks whose (pure) reach decisions the three below keep.
        self._kept_for: policy.CompiledHooks | None = None
        self._reach: changes.KeptUntilChange[tuple[str, str, str], ReachDecision] = changes.KeptUntilChange(MAX_REACH_CACHE)
        #: (sender id, ``to`` of a send) -> (target, reach decision), as reach decisions.
        self._routes: changes.KeptUntilChange[tuple[str, str], tuple[PeerInfo, ReachDecision]] = changes.KeptUntilChange(MAX_REACH_CACHE)
        #: sender id -> the rows ``peers`` lists for it.
        self._listed: changes.KeptUntilChange[str, EncodedOnce] = changes.KeptUntilChange(MAX_LISTINGS_KEPT)
        self._newest: dict[str, Job] = {}
        self._records: dict[str, PeerInfo] = {}
        self._table = routing.PeerTable(holders={}, aliases={})
        self._listing: PeerListing | None = None
        #: peer id -> (its PeerInfo, its rows by relation) as the last listing had them.
        self._rows_of: dict[str, tuple[PeerInfo, dict[str | None, dict[str, Any]]]] = {}

    # Every reader checks the generation itself before it reads what _build made (not a
    # helper that does): info_of runs on every message, and one more call there is felt.

    def tree_record(self, session: str | None) -> Job | None:
        """The job record that carries tree links for ``session``, if any: the newest job
        of that session (the first one made, when two were made at the same time)."""
        if session is None:
            return None
        if changes.generation() != self._generation:
            self._build()
        return self._newest.get(session)

    def peer_table(self) -> routing.PeerTable:
        """Every record (each job, each foreground peer with its session's tree links)
        collapsed by session (``routing.collapse``); kept between changes."""
        if changes.generation() != self._generation:
            self._build()
        return self._table

    def peer_listing(self) -> PeerListing:
        """Every holder of the peer table, ordered by name and id, for ``peers``."""
        if changes.generation() != self._generation:
            self._build()
        if self._listing is None:
            # By name, then id (ids are unique: the sort never compares further).
            order = sorted([(peer.name, peer.id, key, peer) for key, peer in self._table.holders.items()])
            # A holder whose record did not move is the same PeerInfo as in the last
            # listing (the records keep theirs): its rows are taken over, not made again.
            kept, rows_of = self._rows_of, {}
            peers, rows = [], []
            for _, peer_id, _, peer in order:
                entry = kept.get(peer_id)
                if entry is None or entry[0] is not peer:
                    entry = (peer, {None: self.peer_row(peer, None)})
                rows_of[peer_id] = entry
                peers.append(peer)
                rows.append(entry[1])
            self._rows_of = rows_of
            # A holder's place by its id, then by its session key (a key wins over an id).
            index = {peer_id: n for n, (_, peer_id, _, _) in enumerate(order)}
            index.update({key: n for n, (_, _, key, _) in enumerate(order)})
            self._listing = PeerListing(peers=peers, rows=rows, index=index)
        return self._listing

    def info_of(self, record: Job | ForegroundPeer) -> PeerInfo:
        """``record`` as policy sees it: its own entry in the tables, else (a job removed
        while its worker still talks, a peer not listed yet) made from the record as the
        tables would make it."""
        if changes.generation() != self._generation:
            self._build()
        info = self._records.get(record.id)
        if info is not None:
            return info
        if isinstance(record, Job):
            return record.peer_info(accepts_messages=self.host_takes_messages(record))
        tree = self.tree_record(record.session)
        return record.peer_info(tree.peer_info() if tree else None)

    def _build(self) -> None:
        """Build the tables again from the records (every field they read notes its
        changes, so a reader builds only when the generation moved)."""
        generation = changes.generation()
        newest: dict[str, Job] = {}
        for job in self.jobs.values():
            best = newest.get(job.session)
            if best is None or job.created > best.created:
                newest[job.session] = job
        infos = [job.peer_info(accepts_messages=self.host_takes_messages(job)) for job in self.jobs.values()]
        for peer in self.foreground.values():
            record = newest.get(peer.session) if peer.session is not None else None
            infos.append(peer.peer_info(record.peer_info() if record else None))
        self._newest = newest
        self._records = {info.id: info for info in infos}
        self._table = routing.collapse(infos)
        self._listing = None
        self._generation = generation

    def _keeping(self, hooks: policy.CompiledHooks) -> bool:
        """Whether ``hooks``' reach decisions may be kept (every reach plugin declares
        them pure); what was kept for another plugin set is dropped first. (The readers
        ask it only when ``hooks`` are not the ones kept for: a send costs no call here.)"""
        if not hooks.reach_pure:
            return False
        if hooks is not self._kept_for:
            self._kept_for = hooks
            self._reach = changes.KeptUntilChange(MAX_REACH_CACHE)
            self._routes = changes.KeptUntilChange(MAX_REACH_CACHE)
            self._listed = changes.KeptUntilChange(MAX_LISTINGS_KEPT)
        return True

    def reach(self, sender: PeerInfo, target: PeerInfo, addressed_by: str) -> ReachDecision:
        """The reach plugins' decision. A pure one (``roost_core.pure``) is asked once per
        (sender, target, how addressed) while the peer table stays as it is: both records
        come from it, and it follows from them and the config. Any other is asked now."""
        hooks = self.hooks.current()
        if hooks is not self._kept_for and not self._keeping(hooks):
            return hooks.decide_reach(sender, target, addressed_by, self.config)
        return self._reach.get((sender.id, target.id, addressed_by), hooks.decide_reach, sender, target, addressed_by, self.config)

    def reach_all(self, sender: PeerInfo, targets: list[PeerInfo], addressed_by: str) -> list[ReachDecision]:
        """The reach plugins' decision for each of ``targets``, asked now (a broadcast's
        candidates)."""
        decide, config = self.hooks.current().decide_reach, self.config
        return [decide(sender, target, addressed_by, config) for target in targets]

    def route(self, sender: PeerInfo, to: str, hooks: policy.CompiledHooks | None = None) -> tuple[PeerInfo, ReachDecision]:
        """The peer ``to`` names for ``sender``, and the reach decision for it: an id wins
        over a name, and a name is matched among the peers the sender may reach. Kept,
        as pure reach decisions are, until the peer table changes (a ``to`` that names no
        one raises, and is looked up again next time); made anew for any other. ``hooks``:
        the plugin set's :meth:`~roost_core.policy.PluginHooks.current`, when the caller
        has them already (a send asks them once)."""
        if hooks is None:
            hooks = self.hooks.current()
        if hooks is not self._kept_for and not self._keeping(hooks):
            return self._make_route(sender, to)
        return self._routes.get((sender.id, to), self._make_route, sender, to)

    def _make_route(self, sender: PeerInfo, to: str) -> tuple[PeerInfo, ReachDecision]:
        target, addressed_by = routing.resolve_target(to, self.peer_table(), lambda peer: self.reach(sender, peer, "name").allowed)
        return target, self.reach(sender, target, addressed_by)

    def listed_for(self, sender: PeerInfo) -> EncodedOnce:
        """The rows ``peers`` lists for ``sender``: every peer it may reach but its own
        session, parent first, then by relation. With pure reach decisions made once per
        sender while the peer table stays as it is (what it is made from is the table and
        those decisions, which follow from it: :meth:`reach`), and so is their JSON (an
        agent view that asks again and again, at 10,000 peers, would have the loop write
        2 MB each time); with any other, made at each listing."""
        hooks = self.hooks.current()
        if hooks is not self._kept_for and not self._keeping(hooks):
            return self._make_listed(sender)
        return self._listed.get(sender.id, self._make_listed, sender)

    def _make_listed(self, sender: PeerInfo) -> EncodedOnce:
        peers, rows = self.peer_listing().without(sender)
        decisions = self.reach_all(sender, peers, "list")
        # The listing is in name and id order already, which each relation's rows keep.
        by_relation: dict[str, list[dict[str, Any]]] = {}
        for relation_rows, decision in zip(rows, decisions, strict=True):
            if decision.allowed:
                by_relation.setdefault(decision.relation, []).append(PeerListing.row(relation_rows, decision.relation))
        listed = EncodedOnce(by_relation.pop("parent", []))
        for relation in sorted(by_relation):
            listed.extend(by_relation[relation])
        return listed

    def peer_row(self, peer: PeerInfo, relation: str | None) -> dict[str, Any]:
        """The row ``peers`` lists for ``peer``, with ``relation`` as the sender sees it."""
        job = self.jobs.get(peer.id) if peer.kind == "job" else None
        activity = activity_of(peer, job)
        return {
            "id": peer.id,
            "name": peer.name,
            "kind": peer.kind,
            "relation": relation,
            "state": peer.state,
            "status": peer.status,
            "summary": peer.summary,
            "question": peer.question,
            "cwd": peer.cwd,
            "live": peer.live,
            "dialog": bool(job and job.dialog),
            "activity": activity,
            "onMessage": peerstate.ON_MESSAGE[activity],
        }

    def parent_holder(self, peer: PeerInfo | Job, table: routing.PeerTable) -> PeerInfo | None:
        """The record that holds the parent session of ``peer`` (a listed peer, or a job
        record) now, live or not."""
        if peer.parent_session is not None:
            return table.holders.get(peer.parent_session)
        if peer.parent_peer is not None:
            return table.holder_of(peer.parent_peer)
        return None

    def live_parent(self, job: Job) -> PeerInfo | None:
        """The record that holds ``job``'s parent session now, if it is live."""
        if job.parent_session is None and job.parent_peer is None:
            return None
        holder = self.parent_holder(job, self.peer_table())
        return holder if holder is not None and holder.live else None


def activity_of(peer: PeerInfo, job: Job | None) -> str:
    """What ``peer`` is doing (:mod:`roost_core.peerstate`); ``job`` is its record when it
    is a job (None for one removed while it was being listed)."""
    if peer.kind == "foreground":
        return peerstate.foreground_activity(peer.live)
    return peerstate.job_activity(
        state=peer.state,
        live=peer.live,
        dialog=bool(job and job.dialog),
        crashes=job.crashes if job else 0,
        spawned=job.spawned if job else peer.parent_session is not None or peer.parent_peer is not None,
        accepts_messages=peer.accepts_messages,
        background=job.background if job else 0,
    )


@attrs.frozen
class PeerListing:
    """The peer table as ``peers`` lists it, kept with the table.

    ``peers`` are the holders, by name and id; ``rows[n]`` maps a relation to the row of
    ``peers[n]`` with that relation (made once, then shared: never to be changed; the
    ``None`` entry has no relation yet); ``index`` finds a holder's place by its session
    key or its id."""

    peers: list[PeerInfo]
    rows: list[dict[str | None, dict[str, Any]]]
    index: dict[str, int]

    def without(self, sender: PeerInfo) -> tuple[list[PeerInfo], list[dict[str | None, dict[str, Any]]]]:
        """``peers`` and ``rows`` without ``sender``'s own: the holder of its session and
        the holder of its record, when listed."""
        places = {place for place in (self.index.get(routing.session_key(sender)), self.index.get(sender.id)) if place is not None}
        peers, rows = self.peers, self.rows
        for place in sorted(places, reverse=True):
            peers = peers[:place] + peers[place + 1:]
            rows = rows[:place] + rows[place + 1:]
        return peers, rows

    @staticmethod
    def row(rows: dict[str | None, dict[str, Any]], relation: str) -> dict[str, Any]:
        """A listed peer's row with ``relation`` filled in (made the first time)."""
        row = rows.get(relation)
        if row is None:
            row = dict(rows[None])
            row["relation"] = relation
            rows[relation] = row
        return row
