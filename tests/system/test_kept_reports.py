"""A report kept on a child while its no-session parent is away reaches the parent once
when it comes back, however its registrations come."""

from __future__ import annotations

import os

from conftest import wait_until
from reliability.kit import Raw


def register(conn: Raw, frame_id: int, session_id: str) -> dict:
    return {"id": frame_id, "op": "peer_register", "name": "lead", "pid": os.getpid(), "session": None, "sessionId": session_id, "cwd": "/tmp"}


def test_a_kept_report_reaches_a_no_session_parent_once_when_it_registers_twice(daemon, tmp_path):
    """The parent comes back and registers twice on one connection (pi registers again on
    a second ``session_start``, and when its name changes): each registration retries the
    kept reports, and the two retries must not both route the one report."""
    gate = tmp_path / "gate"
    scenario = {"run": [{"steps": [{"wait_for": str(gate)}, {"say": "kid done"}]}]}
    with Raw(daemon.paths.socket, timeout=30) as away:
        answer = away.request(register(away, 1, "away-parent"))
        assert answer["ok"], answer
        lead_id = answer["result"]["id"]
        spawned = away.request({"id": 2, "op": "spawn", "task": "work", "name": "kid", "scenario": scenario})
        assert spawned["ok"], spawned
        kid = spawned["result"]["id"]
    wait_until(lambda: not any(r["live"] for r in daemon.call("agents")["agents"] if r["id"] == lead_id), what="the parent gone")
    gate.write_text("go")
    daemon.wait_job(kid, "done")
    wait_until(lambda: daemon.job(kid)["undeliveredReport"], what="the report kept on the kid")

    with Raw(daemon.paths.socket, timeout=30) as back:
        back.send_frame(register(back, 1, "away-parent"))
        back.send_frame(register(back, 2, "away-parent"))
        assert back.read()["ok"] and back.read()["ok"]
        wait_until(lambda: daemon.job(kid)["undeliveredReport"] is False, what="the kept report routed")
        # A keyed send is answered once its commit is durable, after the commits of both
        # retries: a second push of the report, if any, has come before this answer. (The
        # kid's run for this message reports too, with its own text: not counted.)
        sent = back.request({"id": 3, "op": "send", "to": kid, "message": "thanks", "key": "after-retries"})
        assert sent["ok"], sent
        reports = [event for event in back.events if event.get("event") == "deliver" and event.get("kind") == "report" and "kid done" in event["content"]]
        assert len(reports) == 1, [(event["seq"], event.get("id")) for event in reports]
