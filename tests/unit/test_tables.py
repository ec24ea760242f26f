"""The peer tables (``roost_core.daemon.tables``) built from real job records and
foreground peers, with no daemon: how records collapse by session, how ``to`` resolves,
what is kept until a change and what is asked again after one.

Reach is decided by the default plugins; a recording plugin that decides nothing
(it answers None, first; marked pure, as the default reach is) counts how often the
tables ask. A plugin that is not marked pure is asked at every route and listing."""

from __future__ import annotations

import os
from typing import Any

import pytest

from roost_core import hookimpl, pure
from roost_core.config import Config
from roost_core.daemon import changes
from roost_core.daemon.jobs import Job
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.tables import PeerTables
from roost_core.plugins import make_plugin_manager
from roost_core.protocol import NOT_FOUND, ProtocolError
from roost_core.records import ReachDecision

ROOT = "/s/root.jsonl"


class RecordingReach:
    """Decides nothing: notes each (sender, target, how addressed) it is asked about."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    @hookimpl(tryfirst=True)
    @pure
    def roost_decide_reach(self, sender, target, addressed_by, config):
        self.asked.append((sender.id, target.id, addressed_by))
        return None


class Allowlist:
    """Not pure: allows the (sender name, target name) pairs in ``pairs``, a set the test
    changes (standing in for a file), with relation ``external``; no opinion otherwise."""

    def __init__(self) -> None:
        self.pairs: set[tuple[str, str]] = set()
        self.asked = 0

    @hookimpl(tryfirst=True)
    def roost_decide_reach(self, sender, target):
        self.asked += 1
        return ReachDecision(allowed=True, relation="external") if (sender.name, target.name) in self.pairs else None


class Tables:
    """Peer tables over records the test adds (as the daemon does: into the dicts, then
    ``changes.changed()``)."""

    def __init__(self, *, silent_hosts: tuple[str, ...] = (), extra: tuple[tuple[str, object], ...] = ()) -> None:
        self.jobs: dict[str, Job] = {}
        self.foreground: dict[str, ForegroundPeer] = {}
        self.recorder = RecordingReach()
        config = Config()
        self.pm = pm = make_plugin_manager(config, autoload=False, extra=[("recording", self.recorder), *extra])
        self.tables = PeerTables(self.jobs, self.foreground, pm, config, lambda job: job.host not in silent_hosts)

    def job(self, job_id: str, name: str, *, session: str | None = None, **fields: Any) -> Job:
        job = Job(id=job_id, name=name, host=fields.pop("host", "scripted"), cwd="/", session=session or f"/s/{job_id}.jsonl", token="t", task="x", **fields)
        self.jobs[job.id] = job
        changes.changed()
        return job

    def peer(self, peer_id: str, name: str, *, session: str | None = None, connected: bool = True) -> ForegroundPeer:
        peer = ForegroundPeer(id=peer_id, name=name, session=session, cwd="/", pid=os.getpid(), conn=object() if connected else None)
        self.foreground[peer.id] = peer
        changes.changed()
        return peer


@pytest.fixture
def t() -> Tables:
    return Tables()


def test_a_job_and_a_foreground_peer_of_one_session_are_one_holder(t: Tables) -> None:
    job = t.job("j-1", "worker", session=ROOT, parent_session="/s/lead.jsonl")
    t.peer("f-1", "tui", session=ROOT)
    table = t.tables.peer_table()
    assert list(table.holders) == [ROOT]
    # The connected foreground peer holds the session, with the job's tree links.
    holder = table.holders[ROOT]
    assert (holder.id, holder.kind, holder.parent_session) == ("f-1", "foreground", "/s/lead.jsonl")
    assert table.holder_of("j-1") is holder and table.holder_of("f-1") is holder
    # Disconnected, it no longer outranks the (ended) job.
    t.foreground["f-1"].conn = None
    assert t.tables.peer_table().holder_of("f-1").id == job.id


def test_route_by_name_and_by_id(t: Tables) -> None:
    lead = t.job("j-lead", "lead", session=ROOT)
    t.job("j-help", "helper", parent_session=ROOT, root_session=ROOT)
    t.job("j-tui", "tui-job", parent_session=ROOT, root_session=ROOT)
    t.peer("f-tui", "tui", session="/s/j-tui.jsonl")  # holds that job's session now
    sender = t.tables.info_of(lead)
    by_name, decision = t.tables.route(sender, "helper")
    assert (by_name.id, decision.allowed, decision.relation) == ("j-help", True, "child")
    assert t.recorder.asked[-1] == ("j-lead", "j-help", "name")
    # Any record's id of a session names whoever holds it now; a name, only the holder.
    by_id, decision = t.tables.route(sender, "j-tui")
    assert (by_id.id, decision.relation) == ("f-tui", "child")
    assert t.recorder.asked[-1] == ("j-lead", "f-tui", "id")
    assert t.tables.route(sender, "tui")[0] is by_id
    with pytest.raises(ProtocolError):
        t.tables.route(sender, "tui-job")


def test_a_name_no_peer_has_is_not_found_and_one_reach_refuses_is_refused(t: Tables) -> None:
    lead = t.job("j-lead", "lead", session=ROOT)
    t.job("j-other", "stranger")  # another tree: reach refuses it
    sender = t.tables.info_of(lead)
    with pytest.raises(ProtocolError) as raised:
        t.tables.route(sender, "nobody")
    assert raised.value.code == NOT_FOUND
    assert raised.value.message == "no reachable peer with id or exact name 'nobody'"
    # The one peer with that name, and reach's decision on it (the caller refuses it
    # with the plugin's reason, as by id).
    target, decision = t.tables.route(sender, "stranger")
    assert (target.id, decision.allowed) == ("j-other", False)


def test_a_route_is_kept_until_a_shown_field_changes(t: Tables) -> None:
    lead = t.job("j-lead", "lead", session=ROOT)
    child = t.job("j-child", "child", parent_session=ROOT, root_session=ROOT)
    sender = t.tables.info_of(lead)
    kept = t.tables.route(sender, "child")
    asked = len(t.recorder.asked)
    assert asked > 0
    assert t.tables.route(sender, "child") is kept  # kept: not resolved or asked again
    assert len(t.recorder.asked) == asked
    child.sent = 5  # a field no table shows: still kept
    assert t.tables.route(sender, "child") is kept
    assert len(t.recorder.asked) == asked
    child.state = "running"
    again = t.tables.route(sender, "child")
    assert len(t.recorder.asked) > asked
    assert (kept[0].state, again[0].state) == ("idle", "running")


def test_a_record_added_is_seen_after_a_change_and_only_then(t: Tables) -> None:
    lead = t.job("j-lead", "lead", session=ROOT)
    sender = t.tables.info_of(lead)
    late = Job(id="j-late", name="late", host="scripted", cwd="/", session="/s/late.jsonl", token="t", task="x", parent_session=ROOT, root_session=ROOT)
    t.tables.peer_table()  # built after the record was made
    t.jobs[late.id] = late
    with pytest.raises(ProtocolError):
        t.tables.route(sender, "late")
    changes.changed()
    assert t.tables.route(sender, "late")[0].id == "j-late"


def test_a_reach_decision_is_asked_once_per_change(t: Tables) -> None:
    lead = t.job("j-lead", "lead", session=ROOT)
    other = t.job("j-other", "other")
    sender, target = t.tables.info_of(lead), t.tables.info_of(other)
    decision = t.tables.reach(sender, target, "id")
    assert (decision.allowed, decision.relation) == (False, "external")
    assert t.tables.reach(sender, target, "id") is decision
    t.tables.reach(sender, target, "name")  # another way of addressing: asked
    assert t.recorder.asked == [("j-lead", "j-other", "id"), ("j-lead", "j-other", "name")]
    other.name = "renamed"
    t.tables.reach(sender, target, "id")
    assert t.recorder.asked[-1] == ("j-lead", "j-other", "id") and len(t.recorder.asked) == 3


def test_the_listing_is_by_name_then_id_and_indexed_by_session_and_id(t: Tables) -> None:
    t.job("j-2", "b")
    t.job("j-9", "a")
    t.job("j-3", "a")
    t.peer("f-1", "c", session=None)
    listing = t.tables.peer_listing()
    assert [(peer.name, peer.id) for peer in listing.peers] == [("a", "j-3"), ("a", "j-9"), ("b", "j-2"), ("c", "f-1")]
    assert listing.index["j-9"] == listing.index["/s/j-9.jsonl"] == 1
    assert listing.index["f-1"] == listing.index["peer:f-1"] == 3
    assert listing.rows[2][None] == t.tables.peer_row(listing.peers[2], None)
    assert t.tables.peer_listing() is listing  # kept until a change


def test_listed_for_puts_the_parent_first_and_leaves_out_the_senders_session(t: Tables) -> None:
    t.job("j-lead", "zz-lead", session=ROOT)
    me = t.job("j-me", "me", parent_session=ROOT, root_session=ROOT)
    t.peer("f-me", "me-tui", session=me.session, connected=False)  # my session's other record
    t.job("j-sib", "a-sibling", parent_session=ROOT, root_session=ROOT)
    t.job("j-out", "outsider")
    rows = t.tables.listed_for(t.tables.info_of(me))
    assert [(row["id"], row["relation"]) for row in rows] == [("j-lead", "parent"), ("j-sib", "sibling")]


def test_tree_record_is_the_newest_job_of_a_session(t: Tables) -> None:
    t.job("j-old", "old", session=ROOT, created=1.0)
    t.job("j-new", "new", session=ROOT, created=2.0)
    t.job("j-tie", "tie", session=ROOT, created=2.0)  # made at the same time: the first one wins
    assert t.tables.tree_record(ROOT).id == "j-new"
    assert t.tables.tree_record("/s/none.jsonl") is None
    assert t.tables.tree_record(None) is None


def test_live_parent_is_the_parents_holder_only_while_it_is_live(t: Tables) -> None:
    parent = t.job("j-parent", "parent", session=ROOT)
    child = t.job("j-child", "child", parent_session=ROOT, root_session=ROOT)
    orphan = t.job("j-orphan", "orphan")
    assert t.tables.live_parent(child) is None  # no worker: not live
    parent.worker_pid = 4242
    assert t.tables.live_parent(child).id == "j-parent"
    assert t.tables.live_parent(orphan) is None
    peer = t.peer("f-lead", "lead", session=None)
    by_peer = t.job("j-by-peer", "by-peer", parent_peer="f-lead")
    assert t.tables.live_parent(by_peer).id == "f-lead"
    peer.conn = None
    assert t.tables.live_parent(by_peer) is None


def test_info_of_a_record_the_tables_do_not_hold_is_made_from_it() -> None:
    t = Tables(silent_hosts=("print",))
    assert t.tables.info_of(t.job("j-print", "printer", host="print")).accepts_messages is False
    t.job("j-tree", "tree", session=ROOT, parent_session="/s/lead.jsonl")
    gone = Job(id="j-gone", name="gone", host="print", cwd="/", session="/s/gone.jsonl", token="t", task="x")
    info = t.tables.info_of(gone)  # a job removed while its worker still talks
    assert (info.id, info.accepts_messages) == ("j-gone", False)
    stray = ForegroundPeer(id="f-stray", name="stray", session=ROOT, cwd="/", pid=os.getpid())
    info = t.tables.info_of(stray)  # not registered: tree links from its session's job
    assert (info.id, info.kind, info.parent_session) == ("f-stray", "foreground", "/s/lead.jsonl")


def test_a_listing_made_again_after_a_change_remakes_only_the_moved_records_rows(t: Tables) -> None:
    still = t.job("j-1", "still")
    moving = t.job("j-2", "moving")
    first = t.tables.peer_listing()
    rows = {peer.id: rows for peer, rows in zip(first.peers, first.rows, strict=True)}
    moving.summary = "half way"
    second = t.tables.peer_listing()
    assert second is not first
    again = {peer.id: rows for peer, rows in zip(second.peers, second.rows, strict=True)}
    assert again["j-1"] is rows["j-1"]  # taken over: its record did not move
    assert again["j-2"] is not rows["j-2"] and again["j-2"][None]["summary"] == "half way"
    moving.name = "a-first-now"  # a new name reorders the listing
    assert [peer.id for peer in t.tables.peer_listing().peers] == ["j-2", "j-1"]
    assert still.peer_info() is t.tables.info_of(still)


def test_a_reach_plugin_not_marked_pure_is_asked_at_every_route_and_listing() -> None:
    """Its grant and its revocation count from the next route and listing, with the peer
    table unchanged (no ``changes.changed()`` in between)."""
    allowlist = Allowlist()
    t = Tables(extra=(("allowlist", allowlist),))
    alice = t.job("j-alice", "alice")
    t.job("j-bob", "bob")
    sender = t.tables.info_of(alice)
    generation = changes.generation()
    assert not t.tables.route(sender, "bob")[1].allowed
    assert [row["id"] for row in t.tables.listed_for(sender)] == []
    allowlist.pairs.add(("alice", "bob"))
    target, decision = t.tables.route(sender, "bob")
    assert (target.id, decision.allowed, decision.relation) == ("j-bob", True, "external")
    assert t.tables.route(sender, "j-bob")[1].allowed
    assert [(row["id"], row["relation"]) for row in t.tables.listed_for(sender)] == [("j-bob", "external")]
    asked = allowlist.asked
    t.tables.route(sender, "j-bob")
    assert allowlist.asked > asked  # asked again: nothing kept
    allowlist.pairs.clear()
    assert not t.tables.route(sender, "j-bob")[1].allowed
    assert not t.tables.reach(sender, t.tables.info_of(t.jobs["j-bob"]), "id").allowed
    assert [row["id"] for row in t.tables.listed_for(sender)] == []
    assert changes.generation() == generation


def test_a_plugin_set_change_drops_the_kept_decisions(t: Tables) -> None:
    """Decisions kept for one plugin set are not kept for the next (a plugin registered
    at run time is asked from the next route on, and a pure set keeps afresh)."""
    lead = t.job("j-lead", "lead", session=ROOT)
    t.job("j-other", "other")
    sender = t.tables.info_of(lead)
    assert not t.tables.route(sender, "j-other")[1].allowed
    allowlist = Allowlist()
    allowlist.pairs.add(("lead", "other"))
    t.pm.register(allowlist, name="allowlist")
    assert t.tables.route(sender, "j-other")[1].allowed
    t.pm.unregister(name="allowlist")
    assert not t.tables.route(sender, "j-other")[1].allowed
    asked = len(t.recorder.asked)
    t.tables.route(sender, "j-other")
    assert len(t.recorder.asked) == asked  # pure again: kept
