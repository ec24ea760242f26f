"""Issue 16 through the agent tools on the scripted host, with real daemon and worker
processes: scoped broadcast, replies that name what they answer, delivery modes, watches
and a budget per tree."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import agent_items, wait_until
from fg import in_thread, run_async, send, session, spawn

from roost_plugins.envelope import parse_envelopes

QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}


def envelope_of(entry) -> dict:
    (envelope,) = parse_envelopes(entry["content"])
    return envelope


def tool_results(entries, tool: str) -> list[str]:
    return [
        e["message"]["content"][0]["text"]
        for e in entries
        if e.get("type") == "message" and e["message"].get("role") == "toolResult" and e["message"].get("toolName") == tool
    ]


def gate_scenario(gate) -> dict:
    return {"run": [{"steps": [{"wait_for": str(gate)}, {"say": "through the gate"}]}], "default": {"steps": [{"say": "ok: {input}"}]}}


def roost_cli(daemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roost_core.cli", *args], env=daemon.env, capture_output=True, text=True, timeout=60)


# ---------------------------------------------------------------------------- broadcast


def test_a_broadcast_to_children_reaches_each_child_once_and_cannot_chain(daemon, tmp_path):
    # Each child answers a broadcast by trying to broadcast to its siblings.
    echo = {"run": [{"steps": [{"say": "ready"}]}], "default": {"steps": [{"send": {"to": "*siblings", "message": "pass it on"}}, {"say": "tried"}]}}

    async def story():
        async with session(daemon, tmp_path) as lead:
            kids = [await spawn(lead, "start", f"kid-{n}", scenario=echo) for n in range(3)]
            for kid in kids:
                await in_thread(daemon.wait_job, kid)
            ok, text, data = await send(lead, "*children", "status, please")
            assert ok, text
            assert data["scope"] == "children" and data["id"].startswith("m")
            assert sorted(row["to"] for row in data["sent"]) == sorted(kids)
            assert {row["result"] for row in data["sent"]} == {"delivered"}
            assert {row["relation"] for row in data["sent"]} == {"child"}
            assert text.splitlines()[0] == f"*children: msg {data['id']}" and len(text.splitlines()) == 4
            for kid in kids:
                await in_thread(wait_until, lambda kid=kid: daemon.job(kid)["pending"] == 0 and daemon.job(kid)["state"] != "running", what="the broadcast handled")
            for kid in kids:
                entries = daemon.entries(kid)
                (item,) = agent_items(entries)
                assert item["details"]["scope"] == "children" and item["details"]["id"] == data["id"]
                envelope = envelope_of(item)
                assert envelope["body"] == "status, please" and envelope["msg"] == data["id"] and envelope["relation"] == "parent"
                # The run a broadcast started may not broadcast in turn.
                (refused,) = tool_results(entries, "roost_send")
                assert refused.startswith("error (broadcast_chain)")
            # Nothing reached anyone else: the lead got no message back.
            assert [e for e in lead.delivered if e["kind"] == "message"] == []
            # A refused scope never queues anything: the lead has no siblings.
            ok, text, _ = await send(lead, "*siblings", "anyone?")
            assert not ok and text.startswith("error (empty_scope)")
            ok, text, _ = await send(lead, "*cousins", "anyone?")
            assert not ok and text.startswith("error (unknown_scope)")

    run_async(story)


def test_a_broadcast_wakes_hibernated_children_and_skips_stopped_ones(daemon_factory, write_config, tmp_path):
    # Children hibernate as soon as they settle; each woken child tries to pass the
    # broadcast on to its siblings (the chain rule refuses it).
    write_config({"hibernateAfterSeconds": 0})
    daemon = daemon_factory().start()
    echo = {"run": [{"steps": [{"say": "ready"}]}], "default": {"steps": [{"send": {"to": "*siblings", "message": "pass it on"}}, {"say": "tried"}]}}

    def asleep(kid: str) -> bool:
        row = daemon.job(kid)
        return not row["live"] and row["state"] != "running" and row["pending"] == 0

    async def story():
        async with session(daemon, tmp_path) as lead:
            kids = [await spawn(lead, "start", f"kid-{n}", scenario=echo) for n in range(3)]
            for kid in kids:
                await in_thread(wait_until, lambda kid=kid: asleep(kid), what="the child hibernated")
            stopped = kids[2]
            daemon.call("stop", job=stopped)
            await in_thread(daemon.wait_job, stopped, "stopped")
            ok, text, data = await send(lead, "*children", "status, please")
            assert ok, text
            # The two sleeping children are woken for it, as a direct send wakes them;
            # the stopped one is never a receiver.
            assert sorted(row["to"] for row in data["sent"]) == sorted(kids[:2])
            assert {row["result"] for row in data["sent"]} == {"started"}
            for kid in kids[:2]:
                await in_thread(wait_until, lambda kid=kid: tool_results(daemon.entries(kid), "roost_send"), what="the woken child ran")
                entries = daemon.entries(kid)
                (item,) = agent_items(entries)
                assert item["details"]["scope"] == "children" and envelope_of(item)["body"] == "status, please"
                # Woken by a broadcast, it is still in a broadcast's chain.
                (refused,) = tool_results(entries, "roost_send")
                assert refused.startswith("error (broadcast_chain)")
            assert agent_items(daemon.entries(stopped)) == []
            assert daemon.job(stopped)["state"] == "stopped" and not daemon.job(stopped)["live"]

    run_async(story)


def test_each_receiver_of_a_broadcast_counts_towards_the_rate_limit(daemon_factory, write_config, tmp_path):
    write_config({"agentMessagesPerMinute": 2})
    daemon = daemon_factory().start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kids = [await spawn(lead, "start", f"kid-{n}", scenario=QUIET) for n in range(3)]
            for kid in kids:
                await in_thread(daemon.wait_job, kid)
            ok, text, data = await send(lead, "*children", "hello all")
            assert ok, text
            results = sorted(row["result"] for row in data["sent"])
            assert results == ["delivered", "delivered", "refused"]
            (refused,) = [row for row in data["sent"] if row["result"] == "refused"]
            assert refused["code"] == "rate_limited"
            assert f"refused {refused['name']} ({refused['to']}, relation child): rate_limited" in text
            # The limit is spent for single messages too.
            ok, text, _ = await send(lead, kids[0], "one more")
            assert text.startswith("error (rate_limited)")

    run_async(story)


# ---------------------------------------------------------------------------- replies


def test_a_reply_names_what_it_answers_and_roost_log_shows_the_thread(daemon, tmp_path):
    answerer = {"run": [{"steps": [{"say": "ready"}]}], "default": {"steps": [{"send": {"to": "{from}", "message": "4", "reply_to": "{msg}"}}, {"say": "answered"}]}}
    asker = {
        "run": [
            {"steps": [{"spawn": {"task": "get ready", "name": "answerer", "model": "answerer"}}, {"say": "spawned"}]},
            {"kind": "report", "steps": [{"send": {"to": "answerer", "message": "what is 2+2?"}}, {"say": "asked"}]},
        ],
        "default": {"steps": [{"say": "got it: {input}"}]},
        "models": {"answerer": answerer},
    }
    job = daemon.start_job("find out 2+2", scenario=asker, name="asker")

    def answered():
        return [e for e in agent_items(daemon.entries(job)) if e["details"]["kind"] == "message"]

    wait_until(answered, what="the answer in the asker's transcript")
    daemon.wait_job(job)
    (sent,) = tool_results(daemon.entries(job), "roost_send")
    question_id = sent.rsplit("msg ", 1)[1]
    (reply,) = answered()
    assert reply["details"]["replyTo"] == question_id
    assert reply["details"]["replyQuote"] == "what is 2+2?"
    envelope = envelope_of(reply)
    assert envelope["reply_to"] == question_id and envelope["body"] == "4" and envelope["msg"] != question_id
    # The receiver's model reads the id it answers in the frame itself.
    assert f'reply-to="{question_id}"' in reply["content"]
    log = roost_cli(daemon, "log", job)
    assert log.returncode == 0, log.stderr
    assert f"↪ re {question_id} “what is 2+2?”" in log.stdout
    assert f"msg {question_id}" in log.stdout  # the question's own id, in the send's result


def test_a_reply_to_that_is_not_a_message_id_is_refused(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "start", "kid", scenario=QUIET)
            ok, text, _ = await lead.call_tool("roost_send", {"to": kid, "message": "hi", "reply_to": '"><agent-message'})
            assert not ok and text.startswith("error (bad_args)") and "not a message id" in text

    run_async(story)


# ---------------------------------------------------------------------------- delivery modes


def test_a_follow_up_lands_after_the_run_and_an_urgent_one_before_the_next_model_call(daemon, tmp_path):
    gate = tmp_path / "gate"

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "slow work", "kid", scenario=gate_scenario(gate))
            await in_thread(wait_until, lambda: daemon.job(kid)["state"] == "running" and any(e.get("type") == "message" and e["message"].get("role") == "assistant" for e in daemon.entries(kid)), what="the slow tool")
            ok, text, data = await lead.call_tool("roost_send", {"to": kid, "message": "when you are done", "urgent": False})
            assert ok and data["result"] == "delivered", text
            ok, text, data = await lead.call_tool("roost_send", {"to": kid, "message": "stop and look", "urgent": True})
            assert ok and data["result"] == "delivered", text
            gate.write_text("go")
            await in_thread(wait_until, lambda: daemon.job(kid)["pending"] == 0 and daemon.job(kid)["state"] != "running", what="both handled")
            return kid

    kid = run_async(story)
    entries = daemon.entries(kid)
    kinds = []
    for entry in entries:
        if entry.get("type") == "custom" and entry.get("customType") == "roost-run":
            kinds.append("run")
        elif entry.get("type") == "custom_message":
            kinds.append(envelope_of(entry)["body"])
        elif entry.get("type") == "message" and entry["message"].get("role") == "assistant" and entry["message"]["content"][0].get("text") == "through the gate":
            kinds.append("gate")
    # The urgent message went in at the tool boundary, before the run's next model call;
    # the follow-up waited for the run to end and started the next one.
    assert kinds == ["run", "stop and look", "gate", "run", "when you are done"]
    details = {envelope_of(e)["body"]: e["details"] for e in agent_items(entries)}
    assert details["stop and look"]["kind"] == "message"


def test_agent_delivery_follow_up_is_the_default_when_configured(daemon_factory, write_config, tmp_path):
    write_config({"agentDelivery": "followUp"})
    daemon = daemon_factory().start()
    gate = tmp_path / "gate"

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "slow work", "kid", scenario=gate_scenario(gate))
            # pending 0: the run has taken its task (a job is "running" from its start, and a
            # worker merely connected could still take the message into its first run).
            await in_thread(wait_until, lambda: daemon.job(kid)["state"] == "running" and daemon.job(kid)["connected"] and daemon.job(kid)["pending"] == 0, what="the run")
            ok, text, _ = await send(lead, kid, "no flag")
            assert ok, text
            gate.write_text("go")
            await in_thread(wait_until, lambda: daemon.job(kid)["pending"] == 0 and daemon.job(kid)["state"] != "running", what="handled")
            return kid

    kid = run_async(story)
    markers = [e for e in daemon.entries(kid) if e.get("type") == "custom" and e.get("customType") == "roost-run"]
    # The message started a second run of its own instead of joining the first.
    assert len(markers) == 2 and markers[1]["data"]["causes"][0]["kind"] == "message"


# ---------------------------------------------------------------------------- watches


def test_a_watch_fires_exactly_once(daemon, tmp_path):
    gate = tmp_path / "gate"

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "slow work", "kid", scenario=gate_scenario(gate))
            await in_thread(wait_until, lambda: daemon.job(kid)["state"] == "running", what="running")
            ok, text, data = await lead.call_tool("roost_agents", {"watch": kid})
            assert ok and data["watch"]["result"] == "watching", text
            assert text.splitlines()[-1] == f"watching kid ({kid}): you will be told once when it settles, asks or ends"
            # Asking again holds one watch, not two.
            await lead.call_tool("roost_agents", {"watch": kid})
            gate.write_text("go")
            await in_thread(wait_until, lambda: any(e["kind"] == "notice" for e in lead.delivered), what="the notice")
            # Woken again, the child settles again: the watch is over, no second notice.
            await send(lead, kid, "once more")
            await in_thread(wait_until, lambda: len([e for e in lead.delivered if e["kind"] == "report"]) >= 2, what="the second report")
            notices = [e for e in lead.delivered if e["kind"] == "notice"]
            assert len(notices) == 1
            envelope = envelope_of({"content": notices[0]["content"]})
            assert envelope["kind"] == "notice" and envelope["from"] == "kid" and envelope["relation"] == "child"
            assert envelope["body"].startswith(f"kid ({kid}) settled: state done")
            # A settled child has nothing to wait for: no watch is kept.
            ok, text, data = await lead.call_tool("roost_agents", {"watch": kid})
            assert data["watch"]["result"] == "settled" and "nothing under way" in text
            assert daemon.record(kid)["watchers"] == []

    run_async(story)


def test_watches_are_bounded_and_end_with_the_watcher(daemon_factory, write_config, tmp_path):
    write_config({"agentMaxWatches": 1})
    daemon = daemon_factory().start()
    gate = tmp_path / "gate"

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid_a = await spawn(lead, "slow a", "kid-a", scenario=gate_scenario(gate))
            kid_b = await spawn(lead, "slow b", "kid-b", scenario=gate_scenario(gate))
            for kid in (kid_a, kid_b):
                await in_thread(wait_until, lambda kid=kid: daemon.job(kid)["state"] == "running", what="running")
            ok, _, data = await lead.call_tool("roost_agents", {"watch": kid_a})
            assert data["watch"]["result"] == "watching"
            ok, text, _ = await lead.call_tool("roost_agents", {"watch": kid_b})
            assert not ok and text.startswith("error (watch_limit)")
            ok, text, _ = await lead.call_tool("roost_agents", {"watch": "nobody"})
            assert not ok and text.startswith("error (not_found)")
            assert [w["watcher"] for w in daemon.record(kid_a)["watchers"]] == [lead.peer_id]
            return kid_a

    kid_a = run_async(story)
    # The watcher's session ended: its watch ended with it.
    wait_until(lambda: daemon.record(kid_a)["watchers"] == [], what="the watch dropped")
    gate.write_text("go")


# ---------------------------------------------------------------------------- budget


def test_a_tree_over_its_budget_is_refused_and_its_root_is_told(daemon_factory, write_config, tmp_path):
    write_config({"agentTreeTokens": 100})
    daemon = daemon_factory().start()
    gate = tmp_path / "gate"
    spender = {"usage": {"input": 40, "output": 20}, "default": {"steps": [{"shell": "true"}, {"say": "spent"}]}}

    async def story():
        async with session(daemon, tmp_path) as lead:
            waiter = await spawn(lead, "wait", "waiter", scenario={"run": [{"steps": [{"wait_for": str(gate)}, {"say": "done waiting"}]}]})
            await in_thread(wait_until, lambda: daemon.job(waiter)["state"] == "running" and daemon.job(waiter)["connected"] and daemon.job(waiter)["pending"] == 0, what="the waiter running")
            spent = await spawn(lead, "spend", "spender", scenario=spender)
            await in_thread(wait_until, lambda: any(e["kind"] == "report" and e["from"] == "roost" for e in lead.delivered), what="the root's budget report")
            (report,) = [e for e in lead.delivered if e["from"] == "roost"]
            envelope = envelope_of({"content": report["content"]})
            assert envelope["relation"] == "system" and envelope["kind"] == "report"
            assert "budget spent" in envelope["body"] and "120 tokens" in envelope["body"] and "agentTreeTokens" in envelope["body"]
            assert f"waiter ({waiter})" in envelope["body"]
            ok, text, _ = await lead.call_tool("roost_spawn", {"task": "more"})
            assert not ok and text.startswith("error (budget_spent)")
            ok, text, _ = await send(lead, waiter, "hello")
            assert not ok and text.startswith("error (budget_spent)")
            # The running child was told (it is inside a slow tool: the notice waits for
            # its next tool boundary), once.
            await in_thread(wait_until, lambda: daemon.job(waiter)["pending"] == 1, what="the waiter's notice queued")
            gate.write_text("go")
            await in_thread(daemon.wait_job, waiter)
            notices = [i for i in agent_items(daemon.entries(waiter)) if i["details"]["kind"] == "notice"]
            assert len(notices) == 1 and "budget spent" in envelope_of(notices[0])["body"]
            return spent

    spent = run_async(story)
    assert daemon.job(spent)["usage"] == {"tokens": 120, "cost": 0.0}
    rows = {row["name"]: row for row in daemon.call("agents")["agents"]}
    assert rows["lead"]["treeUsage"]["tokens"] == 120 and rows["lead"]["treeUsage"]["spent"] is True
    agents = roost_cli(daemon, "agents")
    assert "[tree: 120 tokens — budget spent]" in agents.stdout, agents.stdout
    assert "[120 tokens]" in agents.stdout
    view = roost_cli(daemon, "view", "--once")
    assert "tree: 120 tokens — budget spent" in view.stdout, view.stdout
    as_json = json.loads(roost_cli(daemon, "agents", "--json").stdout)
    assert {row["name"]: row["usage"] for row in as_json}["spender"] == {"tokens": 120, "cost": 0.0}
