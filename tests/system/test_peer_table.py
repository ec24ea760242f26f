"""The daemon keeps its collapsed peer table between changes: every change a listing can
show must be in the very next listing and in the very next send's routing, whichever
code path made it (a worker's status, a stop, a remove, a new job, a foreground peer
that registers, renames or goes away)."""

from __future__ import annotations

import json
import os

from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn
from reliability.kit import Raw

QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}


async def listing(me) -> dict[str, dict]:
    ok, _, data = await me.call_tool("roost_agents", {})
    assert ok
    return {row["id"]: row for row in data["peers"]}


def test_every_change_shows_in_the_next_listing(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first task", "kid", scenario=QUIET)
            await in_thread(daemon.wait_job, kid)
            # A worker's settle (job_status): state and summary.
            rows = await listing(lead)
            assert rows[kid]["state"] == "done" and rows[kid]["summary"] == "ok: first task"
            # A stop (the worker goes: live flips too).
            daemon.call("stop", job=kid)
            await in_thread(wait_until, lambda: not daemon.job(kid)["live"], what="worker gone")
            rows = await listing(lead)
            assert rows[kid]["state"] == "stopped" and rows[kid]["live"] is False
            # A new job appears at once, and a removed one is gone at once.
            other = await spawn(lead, "second task", "other", scenario=QUIET)
            assert other in await listing(lead)
            daemon.call("remove", job=kid)
            rows = await listing(lead)
            assert kid not in rows and other in rows
            # A send by id routes by the table too: the removed child is unknown now.
            ok, text, _ = await send(lead, kid, "are you there?")
            assert not ok and "not_found" in text

    run_async(story)


def test_a_foreground_peer_registering_renaming_and_leaving_shows_at_once(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path, name="lead") as lead:
            kid = await spawn(lead, "task", "kid", scenario=QUIET)
            await in_thread(daemon.wait_job, kid)
            kid_view = {"default": {"steps": [{"agents": {}}, {"say": "looked"}]}}
            # The child lists its parent as it is now; then the parent takes a new name.
            await lead.client.call("peer_register", session=lead.session, name="renamed lead", cwd=str(tmp_path), pid=lead.register_pid)
            looker = await spawn(lead, "look", "looker", scenario=kid_view)
            await in_thread(daemon.wait_job, looker)
            seen = next(
                e["message"]["content"][0]["text"]
                for e in daemon.entries(looker)
                if e.get("type") == "message" and e["message"].get("toolName") == "roost_agents"
            )
            assert f"{lead.peer_id}  renamed lead  [parent]" in seen
            parent_id = lead.peer_id
        # The parent's connection closed: its children see it as not running.
        async with session(daemon, tmp_path, name="watcher") as watcher:
            await watcher.ensure_registered()
            rows = daemon.call("agents")["agents"]
            by_id = {row["id"]: row for row in rows}
            assert by_id[parent_id]["state"] == "not running"
            assert by_id[parent_id]["live"] is False

    run_async(story)


def test_listing_order_parent_first_then_relation_then_name(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            for name in ["b-kid", "a-kid", "c-kid"]:
                await in_thread(daemon.wait_job, await spawn(lead, "task", name, scenario=QUIET))
            result = await lead.call("tool_call", name="roost_agents", args={})
            assert [row["name"] for row in result["data"]["peers"]] == ["a-kid", "b-kid", "c-kid"]
            # A fourth child lists from its side: its parent first, then its siblings by name.
            lister = await spawn(lead, "list", "d-lister", scenario={"default": {"steps": [{"agents": {}}, {"say": "looked"}]}})
            await in_thread(daemon.wait_job, lister)
            text = next(
                e["message"]["content"][0]["text"]
                for e in daemon.entries(lister)
                if e.get("type") == "message" and e["message"].get("toolName") == "roost_agents"
            )
            lines = [line.split("  ") for line in text.splitlines() if "  [" in line]
            assert [(name, relation) for _, name, relation, *_ in lines] == [
                ("lead", "[parent]"), ("a-kid", "[sibling]"), ("b-kid", "[sibling]"), ("c-kid", "[sibling]"),
            ]

    run_async(story)


def registered(daemon, name: str) -> tuple[Raw, str]:
    """A no-session foreground peer on a raw socket, and its id."""
    conn = Raw(daemon.paths.socket, timeout=20)
    answer = conn.request({"id": 1, "op": "peer_register", "name": name, "pid": os.getpid(), "session": None, "cwd": "/tmp"})
    assert answer["ok"], answer
    return conn, answer["result"]["id"]


def peers_line(conn: Raw) -> bytes:
    """A ``peers`` answer as the bytes the daemon wrote."""
    conn.send_frame({"id": 2, "op": "peers"})
    return conn.read_line()


def test_a_listing_asked_again_is_the_same_bytes_until_the_table_changes(daemon_factory, write_config):
    """The daemon writes a listing's JSON once and sends it again while the peer table is
    unchanged: an unchanged table gives the same bytes, and a change (a peer comes, a
    peer goes) is in the next answer. (No-session peers are trees of their own: they
    list each other with external reach on.)"""
    write_config({"agentExternalMessages": True})
    daemon = daemon_factory().start()
    (me, _), (first, first_id) = registered(daemon, "lister"), registered(daemon, "first")
    try:
        one, two = peers_line(me), peers_line(me)
        assert one.split(b'"result":', 1)[1] == two.split(b'"result":', 1)[1]
        assert [row["id"] for row in json.loads(two)["result"]["peers"]] == [first_id]
        second, second_id = registered(daemon, "second")
        rows = json.loads(peers_line(me))["result"]["peers"]
        assert sorted(row["id"] for row in rows) == sorted([first_id, second_id])
        assert {row["name"] for row in rows} == {"first", "second"}
        second.close()
        # A no-session peer that leaves stays listed, as not running, once the daemon saw it go.
        gone = lambda: {row["id"]: row["live"] for row in json.loads(peers_line(me))["result"]["peers"]}  # noqa: E731
        wait_until(lambda: gone() == {first_id: True, second_id: False}, what="the second peer shown as gone")
    finally:
        me.close()
        first.close()
