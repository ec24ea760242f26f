"""What the daemon's peer tables are made from notes its own changes
(``roost_core.daemon.changes``): a field a table shows, set anywhere, moves the counter
the tables are kept by; any other field does not."""

from __future__ import annotations

import os

from roost_core.daemon import changes
from roost_core.daemon.jobs import Job
from roost_core.daemon.peers import ForegroundPeer
from roost_core.routing import collapse


def a_job() -> Job:
    return Job(id="j-1", name="worker", host="scripted", cwd="/", session="/s/j-1.jsonl", token="t", task="x")


def test_setting_a_shown_field_notes_a_change_and_a_counter_does_not():
    job = a_job()
    peer = ForegroundPeer(id="f-1", name="lead", session=None, cwd=None, pid=os.getpid())
    for record, shown, other in ((job, "state", "sent"), (peer, "name", "seq")):
        before = changes.generation()
        setattr(record, other, 7)
        assert changes.generation() == before and getattr(record, other) == 7
        setattr(record, shown, "busy")
        assert changes.generation() == before + 1 and getattr(record, shown) == "busy"


def test_every_field_a_peer_row_is_made_from_is_shown():
    """A field peer_info reads that is not in ``shown`` would leave a stale table."""
    job = a_job()
    info = job.peer_info()
    table_fields = {"name", "state", "session", "cwd", "host", "parent_session", "parent_peer", "root_session"}
    assert table_fields <= Job.shown
    assert {"name", "session", "cwd", "conn"} <= ForegroundPeer.shown
    assert collapse([info]).holders  # the record makes a table


def test_a_value_kept_until_change_is_made_again_after_one():
    kept = changes.KeptUntilChange(limit=10)
    made: list[int] = []
    assert kept.get("k", lambda: made.append(1) or "first") == "first"
    assert kept.get("k", lambda: made.append(2) or "second") == "first"
    a_job().state = "running"
    assert kept.get("k", lambda: made.append(3) or "third") == "third"
    assert made == [1, 3]


def test_a_record_keeps_its_peer_info_until_a_shown_field_moves():
    """A table built again after another record's change takes this record's entry over:
    the record keeps its PeerInfo, forgotten when (and only when) a shown field is set."""
    job = a_job()
    info = job.peer_info()
    job.sent = 3  # not shown
    assert job.peer_info() is info
    job.status = "compiling"
    fresh = job.peer_info()
    assert fresh is not info and fresh.status == "compiling"
    assert job.peer_info(accepts_messages=False).accepts_messages is False  # made for its own argument
    assert job.peer_info(accepts_messages=False) is job.peer_info(accepts_messages=False)
    job.worker_pid = 1234
    assert job.peer_info(accepts_messages=False).live is True


def test_a_foreground_peer_keeps_its_peer_info_for_the_same_tree_record_only():
    peer = ForegroundPeer(id="f-1", name="lead", session="/s/lead.jsonl", cwd=None, pid=os.getpid(), conn=object())
    tree = a_job().peer_info()
    info = peer.peer_info(tree)
    assert peer.peer_info(tree) is info
    other_tree = Job(id="j-2", name="w", host="scripted", cwd="/", session="/s/lead.jsonl", token="t", task="x",
                     parent_session="/s/parent.jsonl").peer_info()
    relinked = peer.peer_info(other_tree)
    assert relinked is not info and relinked.parent_session == "/s/parent.jsonl"
    peer.conn = None
    gone = peer.peer_info(other_tree)
    assert gone.live is False and gone.state == "not running"
