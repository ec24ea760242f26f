"""A foreground pi driven over RPC (RPC mode has a UI, so it is a foreground peer): lazy
registration, the writer lock, delivery and ack, re-registration on a new session, and
handing the session to a background job (the spec's "←")."""

from __future__ import annotations

import json
import os

from conftest import wait_until
from fg import in_thread, run_async, send, session
from pikit import agent_items, message_text, user_messages
from reliability.kit import Raw

from roost_core import locks
from roost_core.protocol import MAX_FRAME
from roost_core.transcript import read_entries


def test_joins_lazily_takes_the_lock_gets_messages_and_reregisters(pi_kit, write_config, tmp_path):
    write_config({"agentExternalMessages": True})
    scenario = {
        "run": [{"kind": "reply", "match": "who", "steps": [{"agents": {}}, {"say": "listed them"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    first_file = tmp_path / "fg" / "first.jsonl"
    pi = pi_kit.rpc_pi(first_file, tmp_path / "work")
    pi.state()
    # Tools are there, but the session is no peer until its first roost call.
    assert daemon.call("daemon_status")["foreground"] == 0
    pi.prompt("who is around?")
    wait_until(lambda: daemon.call("daemon_status")["foreground"] == 1, what="the pi peer")
    assert locks.lock_holder(first_file) == pi.process.pid
    assert "roost_agents" in fake.requests()[0]["tools"]

    async def story():
        async with session(daemon, tmp_path, name="outsider") as outsider:
            _ok, _text, rows = await outsider.call_tool("roost_agents", {})
            (peer,) = [row for row in rows["peers"] if row["kind"] == "foreground"]
            _ok, text, data = await send(outsider, peer["id"], "hello from outside")
            assert data["result"] == "delivered", text
            await in_thread(wait_until, lambda: any("hello from outside" in e.get("content", "") for e in agent_items(read_entries(first_file))), 30, what="the message in pi's file")
            # A new session: the old instance lets go (lock, connection), the new one
            # registers by itself (session_start, which pi fires twice here).
            pi.call({"type": "new_session"})
            second_file = pi.state()["sessionFile"]
            await in_thread(wait_until, lambda: locks.lock_holder(second_file) == pi.process.pid, 30, what="the new session's lock")
            _ok, text, rows = await outsider.call_tool("roost_agents", {})
            live = [row for row in rows["peers"] if row["kind"] == "foreground" and row["live"]]
            assert len(live) == 1 and live[0]["id"] != peer["id"], rows
            return peer

    run_async(story)
    assert locks.lock_holder(first_file) is None
    items = agent_items(read_entries(first_file))
    assert len(items) == 1 and items[0]["details"]["kind"] == "message" and items[0]["details"]["relation"] == "external"
    framed = [m for r in fake.requests() for m in r["messages"] if "hello from outside" in message_text(m)]
    assert framed and all(m["role"] == "user" and "<agent-message " in message_text(m) for m in framed)
    # The new pi session stays; the outsider's close reaches the daemon a moment later.
    wait_until(lambda: daemon.call("daemon_status")["foreground"] == 1, what="the outsider gone")


def test_hands_its_session_to_a_background_job(pi_kit, write_config, tmp_path):
    fake = pi_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = pi_kit.daemon()
    file = tmp_path / "fg" / "work.jsonl"
    pi = pi_kit.rpc_pi(file, tmp_path / "work")
    pi.prompt("start the refactor")
    assert file.exists()
    pi.call({"type": "prompt", "message": "/roost-background keep going in the background"})
    (job,) = wait_until(lambda: daemon.call("jobs")["jobs"], what="the background job")
    assert job["session"] == str(file) and job["host"] == "pi"
    row = daemon.wait_job(job["id"], timeout=60)
    assert row["state"] == "done" and row["summary"] == "ok: keep going in the background"
    entries = read_entries(file)
    assert [message_text(e["message"]) for e in user_messages(entries)] == ["start the refactor", "keep going in the background"]
    assert sum(1 for e in entries if e.get("type") == "session") == 1
    # The job's worker holds the file now; the foreground pi went on in a new session.
    assert locks.lock_holder(file) == daemon.record(job["id"])["worker_pid"]
    wait_until(lambda: pi.state()["sessionFile"] != str(file), what="the foreground's new session")
    last = [r for r in fake.requests()][-1]
    assert any("start the refactor" in message_text(m) for m in last["messages"])


def test_a_tool_call_longer_than_a_frame_fails_at_once_and_sends_nothing(pi_kit, write_config, tmp_path):
    """A foreground pi's roost_send of more than a frame (a team lifted the message
    limit): the daemon would discard the line and answer it with no id, so the tool
    waited forever. The extension refuses it before it is written; the model reads why."""
    write_config({"agentExternalMessages": True, "agentMaxMessageChars": 4 * MAX_FRAME})
    daemon = pi_kit.daemon()
    box = daemon.start_job("hello", name="box")
    daemon.wait_job(box)
    scenario = {
        "run": [{"kind": "reply", "match": "big", "steps": [{"send": {"to": box, "message": "x" * (MAX_FRAME + 10)}}, {"say": "tried the big one"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    pi_kit.fake(scenario)
    session_file = tmp_path / "fg" / "big.jsonl"
    pi = pi_kit.rpc_pi(session_file, tmp_path / "work")
    pi.prompt("send the big one")
    results = [e["message"] for e in read_entries(session_file) if e.get("type") == "message" and e["message"].get("role") == "toolResult"]
    (result,) = [m for m in results if m.get("toolName") == "roost_send"]
    assert result.get("isError") and "frame_too_large" in message_text(result) and str(MAX_FRAME) in message_text(result), result
    # Nothing reached the job, nothing is queued or dead.
    assert daemon.job(box)["pending"] == 0 and agent_items(daemon.entries(box)) == []
    assert daemon.call("dead")["dead"] == []


def test_items_that_arrive_as_a_run_ends_are_in_the_session_in_seq_order(pi_kit, write_config, tmp_path):
    """Two items reach a foreground pi while its run's last answer is on its way: a keyed
    send (its push waits for the daemon's record of its answer) and a plain one accepted
    meanwhile (the next frame on the sender's connection; in a tree, a child's report
    while another child's reply is written). pi takes them in as they arrive, so they
    must arrive in seq order: the session holds them in that order."""
    write_config({"agentExternalMessages": True})
    scenario = {
        "run": [
            {"kind": "reply", "match": "who", "steps": [{"agents": {}}, {"say": "listed them"}]},
            {"kind": "reply", "match": "finish", "steps": [{"say": "finishing"}]},
        ],
        "default": {"steps": [{"say": "noted: {input}"}]},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    session_file = tmp_path / "fg" / "parent.jsonl"
    pi = pi_kit.rpc_pi(session_file, tmp_path / "work")
    pi.prompt("who is around?")
    (peer,) = wait_until(lambda: [row["id"] for row in daemon.call("agents")["agents"] if row["kind"] == "foreground"], what="the pi peer")
    # The run's last answer waits while both items are sent, so both arrive as it ends.
    fake.hold = lambda reply: reply.get("text") == "finishing"
    ends = pi.count("agent_end")
    pi.send({"type": "prompt", "message": "finish up"})
    assert fake.holding.wait(60), "the run's last answer never started"
    with Raw(daemon.paths.socket) as sender:
        assert sender.request({"id": "reg", "op": "peer_register", "pid": os.getpid(), "name": "sender"})["ok"]
        sender.send(b"".join(json.dumps(frame).encode() + b"\n" for frame in [
            {"id": 1, "op": "send", "to": peer, "message": "the reply", "key": "reply-key"},
            {"id": 2, "op": "send", "to": peer, "message": "the report"},
        ]))
        answers = [sender.read(), sender.read()]
    assert all(answer["ok"] and answer["result"]["result"] == "delivered" for answer in answers), answers
    fake.release.set()
    wait_until(lambda: len(agent_items(read_entries(session_file))) == 2 and pi.count("agent_end") > ends, 60, what="both items in the session")
    items = agent_items(read_entries(session_file))
    assert [item["details"]["seq"] for item in items] == [answer["result"]["seq"] for answer in answers], items
    assert ["the reply" in item["content"] for item in items] == [True, False]
