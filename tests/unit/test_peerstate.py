"""What a peer is doing and what a message does to it (``roost_core.peerstate``), for each
combination the daemon's records can be in."""

from __future__ import annotations

import pytest

from roost_core.peerstate import (
    ON_MESSAGE,
    background_text,
    foreground_activity,
    job_activity,
    label,
)


def activity(state="idle", live=True, dialog=False, crashes=0, spawned=True, accepts_messages=True, background=0) -> str:
    return job_activity(
        state=state, live=live, dialog=dialog, crashes=crashes, spawned=spawned, accepts_messages=accepts_messages, background=background
    )


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
        # Settled, its worker there, processes of its own still running (not hibernated).
        ({"state": "done", "background": 2}, "background"),
        ({"state": "running", "background": 2}, "running"),
        ({"state": "needs_input", "background": 1}, "needs_input"),
        ({"state": "stopped", "background": 1}, "ended"),
        ({"state": "done", "live": False, "background": 1}, "hibernated"),  # (a stale count: no worker, nothing runs)
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


def test_background_text_says_how_many_and_which() -> None:
    assert background_text({"background": 0}) == "" and background_text({}) == ""
    assert background_text({"background": 1, "backgroundShown": [{"pid": 7, "command": "npm run dev"}]}) == "1 background process: npm run dev"
    shown = [{"pid": 7, "command": "a"}, {"pid": 8, "command": "b"}]
    assert background_text({"background": 9, "backgroundShown": shown}) == "9 background processes: a; b"
    assert label("done", "background") == "done, background"
