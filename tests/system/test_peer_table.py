"""The daemon keeps its collapsed peer table between changes: every change a listing can
show must be in the very next listing and in the very next send's routing, whichever
code path made it (a worker's status, a stop, a remove, a new job, a foreground peer
that registers, renames or goes away)."""

from __future__ import annotations

from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn

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
