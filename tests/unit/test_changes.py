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
