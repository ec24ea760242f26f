"""What a peer is doing and what a message does to it (``roost_core.peerstate``), for each
combination the daemon's records can be in."""

from __future__ import annotations

import pytest

from roost_core.peerstate import ON_MESSAGE, foreground_activity, job_activity, label


def activity(state="idle", live=True, dialog=False, crashes=0, spawned=True, accepts_messages=True) -> str:
    return job_activity(state=state, live=live, dialog=dialog, crashes=crashes, spawned=spawned, accepts_messages=accepts_messages)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"state": "running"}, "running"),
        ({"state": "done"}, "idle"),
        ({"state": "failed"}, "idle"),  # a run failed, its worker is there: the next message starts a run
        ({"state": "needs_input"}, "needs_input"),
        ({"state": "needs_input", "dialog": True}, "dialog"),
        ({"state": "done", "live": False}, "hibernated"),
        ({"state": "needs_input", "live": False}, "hibernated"),
        ({"state": "done", "live": False, "spawned": False}, "asleep"),
        ({"state": "failed", "live": False}, "crashed"),
        ({"state": "idle", "live": False, "crashes": 1}, "crashed"),  # died while idle
        ({"state": "stopped", "live": False}, "ended"),
        ({"state": "stopped", "live": True}, "ended"),  # its worker is being ended
        ({"state": "running", "accepts_messages": False}, "no messages"),
    ],
)
def test_job_activity(fields, expected) -> None:
    assert activity(**fields) == expected
    assert expected in ON_MESSAGE


def test_foreground_activity_and_labels() -> None:
    assert foreground_activity(True) == "connected" and foreground_activity(False) == "gone"
    assert label("done", "hibernated") == "done, hibernated"
    assert label("done", "idle") == "done"
    assert label("stopped", "ended") == "stopped"
    assert label("not running", "gone") == "not running"
    assert label("idle", None) == "idle"
