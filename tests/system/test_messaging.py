"""Messaging (M9a) through real processes: peers, reach, every send result, the one queue."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest
from conftest import agent_items, user_messages, wait_until
from fg import in_thread, run_async, send, session, spawn, wake_reaped

from roost_core.protocol import ProtocolError
from roost_plugins.envelope import parse_envelopes

QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}


def gate_scenario(gate) -> dict:
    """A first run that waits at a gate (a slow tool), then answers everything."""
    return {"run": [{"steps": [{"wait_for": str(gate)}, {"say": "through the gate"}]}], "default": {"steps": [{"say": "ok: {input}"}]}}


def envelope_of(entry) -> dict:
    (envelope,) = parse_envelopes(entry["content"])
    return envelope


# ---------------------------------------------------------------------------- peers and tree


def test_children_are_peers_with_relations_seen_from_both_sides(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            # kid-a looks at its peers once kid-b exists (the gate opens after that spawn).
            gate = tmp_path / "kid-b-spawned"
            kid_a = await spawn(lead, "task a", "kid-a", scenario={"default": {"steps": [{"wait_for": str(gate)}, {"agents": {}}, {"say": "looked"}]}})
            kid_b = await spawn(lead, "task b", "kid-b", scenario=QUIET)
            gate.touch()
            ok, text, data = await lead.call_tool("roost_agents", {})
            assert ok
            rows = {row["id"]: row for row in data["peers"]}
            assert set(rows) == {kid_a, kid_b}
            assert {row["relation"] for row in rows.values()} == {"child"}
            assert "kid-a" in text and "[child]" in text
            await in_thread(daemon.wait_job, kid_a)
            # kid-a listed its peers from its own side: its parent and its sibling.
            result = next(e for e in daemon.entries(kid_a) if e.get("type") == "message" and e["message"].get("toolName") == "roost_agents")
            listing = result["message"]["content"][0]["text"]
            assert f"{lead.peer_id}  lead  [parent]" in listing
            assert f"{kid_b}  kid-b  [sibling]" in listing
            rows = {row["id"]: row for row in daemon.call("jobs")["jobs"]}
            assert rows[kid_a]["parentSession"] == str(tmp_path / "lead.jsonl")
            assert rows[kid_a]["rootSession"] == str(tmp_path / "lead.jsonl")
            assert rows[kid_a]["parent"] == lead.peer_id

    run_async(story)


def test_lazy_registration_and_reregistration_replaces_the_binding(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            assert daemon.call("daemon_status")["foreground"] == 0
            peer_id = await lead.ensure_registered()
            assert peer_id.startswith("f") and len(peer_id) == 8
            assert daemon.call("daemon_status")["foreground"] == 1
            # The same session registering again (resume/reload) gets the same id.
            again = await lead.client.call("peer_register", session=lead.session, name="lead", cwd=str(tmp_path), pid=os.getpid())
            assert again["id"] == peer_id

    run_async(story)


# ---------------------------------------------------------------------------- send results


@pytest.mark.smoke
def test_delivered_to_a_live_child_and_back_to_the_parent(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "start", "kid", scenario={"run": [{"steps": [{"say": "ready"}]}], "default": {"steps": [{"send": {"to": "{parent}", "message": "answer to {input}"}}]}})
            await in_thread(daemon.wait_job, kid)
            ok, text, data = await send(lead, kid, "what is 2+2?")
            assert ok and data["result"] == "delivered" and data["relation"] == "child"
            # The message id names the message, for a reply that answers it (reply_to).
            assert text == f"delivered to kid ({kid}, relation child); msg {data['id']}"
            assert data["id"].startswith("m") and len(data["id"]) == 9
            await in_thread(wait_until, lambda: any(e["kind"] == "message" for e in lead.delivered), what="answer")
            (event,) = [e for e in lead.delivered if e["kind"] == "message"]
            assert event["kind"] == "message" and event["from"] == kid and event["relation"] == "child"
            envelope = envelope_of({"content": event["content"]})
            assert envelope["from"] == "kid" and envelope["relation"] == "child"
            assert "answer to" in envelope["body"] and "what is 2+2?" in envelope["body"]
            # The child's transcript holds the message as its own framed entry, never as a
            # user message.
            (item,) = agent_items(daemon.entries(kid))
            assert item["details"]["seq"] > 0 and item["details"]["from"] == lead.peer_id
            assert envelope_of(item)["relation"] == "parent"
            assert "what is 2+2?" not in " ".join(user_messages(daemon.entries(kid)))
        # The lead's own session file got the delivered item too.
        from roost_core.transcript import read_entries

        kinds = [e["details"]["kind"] for e in agent_items(read_entries(tmp_path / "lead.jsonl"))]
        assert kinds.count("message") == 1

    run_async(story)


def test_sibling_by_exact_name_and_never_partial(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid_b = await spawn(lead, "wait", "kid-b", scenario=QUIET)
            await in_thread(daemon.wait_job, kid_b)  # connected, so the send is "delivered"
            kid_a = await spawn(lead, "talk", "kid-a", scenario={"default": {"steps": [{"send": {"to": "kid-b", "message": "hi sibling"}}, {"send": {"to": "kid", "message": "partial"}}]}})
            await in_thread(daemon.wait_job, kid_a)
            await in_thread(daemon.wait_job, kid_b)
            results = [e["message"]["content"][0]["text"] for e in daemon.entries(kid_a) if e.get("type") == "message" and e["message"].get("role") == "toolResult"]
            assert re.fullmatch(rf"delivered to kid-b \({kid_b}, relation sibling\); msg m[0-9a-f]{{8}}", results[0]), results[0]
            assert results[1].startswith("error (not_found)")
            (item,) = agent_items(daemon.entries(kid_b))
            assert envelope_of(item)["relation"] == "sibling" and envelope_of(item)["body"] == "hi sibling"

    run_async(story)


@pytest.mark.smoke
def test_started_when_the_target_was_reaped(daemon_factory, write_config, tmp_path):
    write_config({"reapAfterSeconds": 0.3})
    daemon = daemon_factory().start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first", "kid", scenario=QUIET)
            await wake_reaped(daemon, lead, kid, "wake up")
            await in_thread(daemon.wait_job, kid)
            items = agent_items(daemon.entries(kid))
            assert [envelope_of(i)["body"] for i in items] == ["wake up"]

    run_async(story)


def test_stopped_target_is_not_woken_and_keeps_the_message(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first", "kid", scenario=QUIET)
            await in_thread(daemon.wait_job, kid)
            daemon.call("stop", job=kid)
            await in_thread(daemon.wait_reaped, kid)
            _ok, text, data = await send(lead, kid, "are you there?")
            assert data["result"] == "stopped"
            assert text.startswith("stopped: kid")
            row = daemon.job(kid)
            assert row["live"] is False and row["pending"] == 1
            # The user starts it again: the waiting message is delivered with the reply.
            assert daemon.call("reply", job=kid, text="carry on")["result"] == "started"
            await in_thread(daemon.wait_job, kid, "done", "idle")
            assert [envelope_of(i)["body"] for i in agent_items(daemon.entries(kid))] == ["are you there?"]

    run_async(story)


def test_queued_while_the_worker_is_live_but_not_connected(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first", "kid", scenario=QUIET)
            await in_thread(daemon.wait_job, kid)
            pid = daemon.record(kid)["worker_pid"]
            os.kill(pid, signal.SIGSTOP)
            try:
                daemon.kill9()
                daemon.restart()
                await lead.ensure_registered()
                _ok, text, data = await send(lead, kid, "while you were away")
                assert data["result"] == "queued", text
            finally:
                os.kill(pid, signal.SIGCONT)
            await in_thread(wait_until, lambda: daemon.job(kid)["pending"] == 0, what="delivered")
            assert [envelope_of(i)["body"] for i in agent_items(daemon.entries(kid))] == ["while you were away"]

    run_async(story)


def test_not_running_when_a_foreground_peer_is_gone(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first", "kid", scenario={"run": [{"steps": [{"wait_for": str(tmp_path / "gate")}, {"send": {"to": "{parent}", "message": "late news"}}]}]})
        # The lead has left; its child reports to nobody running.
        (tmp_path / "gate").write_text("go")
        await in_thread(daemon.wait_job, kid)
        results = [e["message"]["content"][0]["text"] for e in daemon.entries(kid) if e.get("type") == "message" and e["message"].get("toolName") == "roost_send"]
        assert len(results) == 1 and re.fullmatch(rf"not running: lead \({lead.peer_id}, relation parent\); msg m[0-9a-f]{{8}}", results[0]), results

    run_async(story)


def test_waiting_on_a_dialog(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "deploy", "kid", scenario={"run": [{"steps": [{"dialog": "Deploy to prod?"}, {"say": "deployed: {input}"}]}], "default": {"steps": [{"say": "ok"}]}})
            await in_thread(wait_until, lambda: daemon.job(kid)["dialog"], what="dialog open")
            assert daemon.job(kid)["state"] == "needs_input" and daemon.job(kid)["question"] == "Deploy to prod?"
            _ok, text, data = await send(lead, kid, "please hurry")
            assert data["waiting"] == "waiting on a dialog"
            assert text.endswith(f"— waiting on a dialog; msg {data['id']}")
            # The message waits while the dialog is open: it is not in the transcript.
            assert agent_items(daemon.entries(kid)) == []
            daemon.call("reply", job=kid, text="yes")
            await in_thread(daemon.wait_job, kid, "done", "idle")
            entries = daemon.entries(kid)
            answer = next(e for e in entries if e.get("type") == "message" and e["message"].get("toolName") == "confirm")
            assert answer["message"]["content"][0]["text"] == "yes" and answer["roost"]["dialog"] is True
            # The agent message never answered the dialog; it came after.
            assert entries.index(answer) < entries.index(agent_items(entries)[0])

    run_async(story)


def test_an_agents_tool_cannot_answer_a_dialog_or_reply_as_the_user(daemon, tmp_path):
    """Only a person answers a dialog: ``roost answer`` and ``roost reply`` run by a job's
    agent (its Bash tool, below its worker) are refused with ``not_a_person``, and the
    dialog stays open for the user, whose own ``roost answer`` goes through."""
    import shlex
    import sys

    asker = daemon.start_job("deploy", scenario={"run": [{"steps": [{"dialog": "Deploy to prod?", "options": ["yes", "no"]}, {"say": "deployed: {input}"}]}]})
    wait_until(lambda: daemon.job(asker)["dialog"], what="the dialog open")
    out = tmp_path / "tried.txt"
    roost = f"{shlex.quote(sys.executable)} -m roost_core.cli"
    command = f"{roost} answer {asker} yes >> {out} 2>&1; echo answer-exit=$? >> {out}; {roost} reply {asker} yes >> {out} 2>&1; echo reply-exit=$? >> {out}"
    sneaky = daemon.start_job("try it", scenario={"run": [{"steps": [{"shell": command}, {"say": "tried"}]}]})
    daemon.wait_job(sneaky, "done")
    tried = out.read_text()
    assert "answer-exit=1" in tried and "reply-exit=1" in tried, tried
    assert tried.count("roost: not_a_person: ") == 2 and f"inside job {sneaky}" in tried, tried
    row = daemon.job(asker)
    assert row["dialog"] and row["pending"] == 0, row  # nothing reached it
    # Shown, not answered: an agent may still read what a dialog asks.
    with daemon.client() as conn:
        assert conn.call("answer", job=asker)["question"] == "Deploy to prod?"
    # The user answers from outside any job.
    assert daemon.call("answer", job=asker, text="no")["answer"] == "no"
    daemon.wait_job(asker, "done")
    answers = [e for e in daemon.entries(asker) if e.get("type") == "message" and e["message"].get("toolName") == "confirm"]
    assert [a["message"]["content"][0]["text"] for a in answers] == ["no"]


def test_shell_jobs_take_no_messages(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "echo hi", "sh", host="shell")
            ok, text, _data = await send(lead, kid, "hello?")
            assert not ok and text.startswith("error (not_accepted)")

    run_async(story)


# ---------------------------------------------------------------------------- reach


def outsider(daemon, tmp_path) -> str:
    job = daemon.start_job("outside", scenario=QUIET, name="outsider")
    daemon.wait_job(job)
    return job


def test_external_is_off_by_default(daemon, tmp_path):
    job = outsider(daemon, tmp_path)

    async def story():
        async with session(daemon, tmp_path) as lead:
            ok, text, _ = await send(lead, job, "hi")
            assert not ok and text.startswith("error (unreachable)") and "agentExternalMessages" in text
            # By name as by id: reach's refusal and its reason, not a "not found"
            # that hides it (issue 49 B14).
            ok, text, _ = await send(lead, "outsider", "hi")
            assert not ok and text.startswith("error (unreachable)") and "agentExternalMessages" in text, text
            _, _, data = await lead.call_tool("roost_agents", {})
            assert data["peers"] == []

    run_async(story)


def test_external_on_reaches_by_exact_id_only_and_is_framed_external(daemon_factory, write_config, tmp_path):
    write_config({"agentExternalMessages": True})
    daemon = daemon_factory().start()
    job = outsider(daemon, tmp_path)

    async def story():
        async with session(daemon, tmp_path) as lead:
            ok, text, data = await send(lead, job, "hello stranger")
            assert ok and data["relation"] == "external", text
            ok, text, _ = await send(lead, "outsider", "by name")
            assert not ok and text.startswith("error (unreachable)"), text
            _, _, data = await lead.call_tool("roost_agents", {})
            assert [(row["id"], row["relation"]) for row in data["peers"]] == [(job, "external")]
            await in_thread(daemon.wait_job, job)
            (item,) = agent_items(daemon.entries(job))
            assert envelope_of(item)["relation"] == "external"

    run_async(story)


def test_project_config_cannot_widen_reach(daemon, tmp_path):
    project = tmp_path / "repo"
    (project / ".pi").mkdir(parents=True)
    (project / ".pi" / "roost.json").write_text(json.dumps({"agentExternalMessages": True, "agentMaxHops": 100, "defaultHost": "scripted"}))
    job = daemon.start_job("outside", scenario=QUIET, cwd=str(project))
    daemon.wait_job(job)

    async def story():
        async with session(daemon, project) as lead:
            _ok, text, _ = await send(lead, job, "hi")
            assert text.startswith("error (unreachable)")

    run_async(story)


def test_self_send_and_size_and_rate_limits(daemon_factory, write_config, tmp_path):
    write_config({"agentMessagesPerMinute": 3})
    daemon = daemon_factory().start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "listen", "kid", scenario=QUIET)
            me = await lead.ensure_registered()
            ok, text, _ = await send(lead, me, "me?")
            assert text.startswith("error (self_send)")
            ok, text, _ = await send(lead, kid, "x" * 8001)
            assert text.startswith("error (message_too_long)")
            for n in range(3):
                ok, text, _ = await send(lead, kid, f"m{n}")
                assert ok, text
            ok, text, _ = await send(lead, kid, "one too many")
            assert text.startswith("error (rate_limited)")
            await in_thread(daemon.wait_job, kid)
            bodies = [envelope_of(i)["body"] for i in agent_items(daemon.entries(kid))]
            assert bodies == ["m0", "m1", "m2"]

    run_async(story)


def test_agent_item_cap_is_separate_from_user_replies(daemon, tmp_path):
    gate = tmp_path / "gate"

    async def story():
        async with session(daemon, tmp_path) as lead:
            # The child is busy at a gate: everything sent meanwhile waits in its queue.
            kid = await spawn(lead, "first", "kid", scenario={"run": [{"steps": [{"wait_for": str(gate)}, {"say": "through"}]}], **QUIET})
            await in_thread(wait_until, lambda: daemon.job(kid)["connected"] and daemon.job(kid)["pending"] == 0, what="busy")
            for n in range(20):
                await lead.call("send", to=kid, message=f"m{n}")
            with pytest.raises(ProtocolError) as err:
                await lead.call("send", to=kid, message="m20")
            assert err.value.code == "queue_full" and "20 agent items" in str(err.value)
            # A broadcast's item is refused at the cap too; asked again after a lost answer
            # (``again``), it is taken past it, as a send is.
            (full,) = (await lead.call("send", to="*children", message="all: m20", key="first-ask"))["sent"]
            assert full["result"] == "refused" and full["code"] == "queue_full", full
            (taken,) = (await lead.call("send", to="*children", message="all: m20", key="lost-answer", again=True))["sent"]
            assert taken["result"] in ("delivered", "queued"), taken
            # The user can still reply: 50 replies have their own room.
            for n in range(50):
                daemon.call("reply", job=kid, text=f"r{n}")
            with pytest.raises(ProtocolError) as err:
                daemon.call("reply", job=kid, text="r50")
            assert err.value.code == "queue_full" and "50 user replies" in str(err.value)
            # A reply asked again whose first answer was lost (``again``) is not refused:
            # its first ask had room and may have reached the job.
            assert daemon.call("reply", job=kid, text="r50", key="lost-answer", again=True)["result"] in ("delivered", "queued")
            gate.write_text("open")
            await in_thread(daemon.wait_job, kid, "done", "idle", timeout=60)
            entries = daemon.entries(kid)
            assert [envelope_of(i)["body"] for i in agent_items(entries)] == [*(f"m{n}" for n in range(20)), "all: m20"]
            assert user_messages(entries)[1:] == [f"r{n}" for n in range(51)]

    run_async(story)
