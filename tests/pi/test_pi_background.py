"""Background pi jobs (host ``pi``): the real pi in RPC mode under a roost worker, with the
fake model. Reports, mid-turn messages and a reaped job that comes back with --session."""

from __future__ import annotations

import json

from conftest import wait_until
from fg import in_thread, run_async, send, send_after_first_call, session, spawn
from pikit import agent_items, message_text, slow_tool_scenario, user_messages

from roost_core.policy import NO_USER_AUTHORITY

AUTHORITY_LINE = NO_USER_AUTHORITY.splitlines()[0]


def roost_seqs(entries):
    """Seqs that the pi host tagged onto user messages (``message.roost``)."""
    return [e["message"]["roost"]["seq"] for e in user_messages(entries) if isinstance(e["message"].get("roost"), dict)]


def framed_inputs(request: dict) -> list[str]:
    """The agent items (user-role messages with an envelope) of one model request."""
    return [message_text(m) for m in request["messages"] if m.get("role") == "user" and "<agent-message " in message_text(m)]


def notice_follows(request: dict, sender: str) -> bool | None:
    """Whether the envelope from ``sender`` (``from="NAME"``) in ``request`` is followed
    by the no-user-authority notice within its run of envelopes (its own text, or a later
    envelope's that reached the model with it); None when the request has no such one."""
    messages = [message_text(m) if m.get("role") == "user" else None for m in request["messages"]]
    for index, text in enumerate(messages):
        if text is not None and sender in text and "<agent-message " in text:
            for later in messages[index:]:
                if later is None or "<agent-message " not in later:
                    return False  # the run of envelopes ended without the notice
                if AUTHORITY_LINE in later[later.rfind("</agent-message>"):]:
                    return True
            return False
    return None


def test_a_pi_job_runs_its_task_and_tags_the_seq(pi_kit, tmp_path):
    env_dump = tmp_path / "tool-env.txt"
    fake = pi_kit.fake({"default": {"steps": [{"shell": f"env > {env_dump}"}, {"say": "Done: {input}"}]}})
    daemon = pi_kit.daemon()
    job = daemon.start_job("build the thing", host="pi", name="builder")
    row = daemon.wait_job(job, timeout=60)
    assert row["state"] == "done", row
    assert row["summary"] == "Done: build the thing"
    entries = daemon.entries(job)
    assert [message_text(e["message"]) for e in user_messages(entries)] == ["build the thing"]
    assert roost_seqs(entries) == [1]
    # pi's tools never see the job token, nor the worker's private channel.
    tool_env = env_dump.read_text()
    assert "PI_JOB_TOKEN" not in tool_env and daemon.record(job)["token"] not in tool_env
    assert "ROOST_PI_BRIDGE" not in tool_env
    requests = fake.requests()
    assert len(requests) == 2
    assert {"roost_agents", "roost_send", "roost_spawn", "bash"} <= set(requests[0]["tools"])


def test_one_scenario_runs_on_both_hosts(pi_kit):
    scenario = {"default": {"steps": [{"say": "Looking"}, {"shell": "echo hi"}, {"say": "Done: {input}"}]}}
    pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    rows = {}
    for host in ("scripted", "pi"):
        job = daemon.start_job("same task", host=host, scenario=scenario)
        rows[host] = daemon.wait_job(job, timeout=60)
    assert rows["scripted"]["state"] == rows["pi"]["state"] == "done"
    assert rows["scripted"]["summary"] == rows["pi"]["summary"] == "Done: same task"


def test_pi_parent_gets_both_childrens_reports_once_and_framed(pi_kit):
    scenario = {
        "run": [
            {
                "steps": [
                    {"spawn": {"task": "count the apples", "name": "kid-a", "model": "kid"}},
                    {"spawn": {"task": "count the pears", "name": "kid-b", "model": "kid"}},
                    {"say": "spawned two"},
                ]
            }
        ],
        "default": {"steps": [{"say": "noted {from_name}"}]},
        "models": {"kid": {"default": {"steps": [{"say": "finished: {input}"}]}}},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    parent = daemon.start_job("delegate the counting", host="pi", name="lead")

    def reports():
        return [e for e in agent_items(daemon.entries(parent)) if e["details"]["kind"] == "report"]

    wait_until(lambda: len(reports()) >= 2, timeout=90, what="two reports in the parent's session file")
    daemon.wait_job(parent, timeout=60)
    got = reports()
    assert sorted(e["details"]["fromName"] for e in got) == ["kid-a", "kid-b"]
    assert len({e["details"]["seq"] for e in got}) == 2  # each exactly once
    assert all(e["details"]["relation"] == "child" for e in got)
    rows = {row["name"]: row for row in daemon.call("jobs")["jobs"]}
    assert rows["kid-a"]["host"] == "pi" and rows["kid-a"]["parent"] in (parent, None)
    # The parent's next model requests carry the reports, framed as agent messages with
    # the no-user-authority text, never as plain user input.
    # Reports that reach the model together carry the notice once, after the last of them
    # (envelope_rules.one_notice): each is followed by it within its run of envelopes.
    parent_requests = [r for r in fake.requests() if r["model"] == "fake-model"]
    seen, followed = {}, {}
    for request in parent_requests:
        for name in ("kid-a", "kid-b"):
            texts = [text for text in framed_inputs(request) if f'from="{name}"' in text and 'kind="report"' in text]
            if texts and name not in seen:
                seen[name], followed[name] = texts[0], notice_follows(request, f'from="{name}"')
    assert followed == {"kid-a": True, "kid-b": True}, followed
    assert "finished: count the apples" in seen["kid-a"]
    # The children run the model they were spawned with (the fake routes "kid" to their
    # scenario) and the parent's thinking level, which the extension filled in.
    kid_requests = [r for r in fake.requests() if r["model"] == "kid"]
    assert len(kid_requests) >= 2
    for name in ("kid-a", "kid-b"):
        record = daemon.record(rows[name]["id"])
        assert record["model"] == "kid" and record["thinking"] == "off"


def test_a_message_sent_during_a_slow_tool_reaches_the_next_model_call(pi_kit, tmp_path):
    gate = tmp_path / "gate"
    fake = pi_kit.fake(slow_tool_scenario(gate))
    daemon = pi_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "do the slow thing", "slowpoke", host="pi")
            # The model has asked for the slow tool: pi is inside it now.
            await send_after_first_call(lead, kid, fake.requests, "also check the docs", 60)
            # The worker holds the message (its log says so), then the slow tool may finish.
            worker_log = daemon.paths.jobs_dir / f"{kid}.log"
            await in_thread(
                wait_until,
                lambda: worker_log.exists() and "arrived during a run" in worker_log.read_text(),
                60,
                what="the worker to hold the message",
            )
            gate.write_text("go")
            await in_thread(daemon.wait_job, kid, timeout=60)
            return kid

    kid = run_async(story)
    requests = [r for r in fake.requests() if r["model"] == "fake-model"]
    # Call 1 asked for the tool; call 2 (right after the tool) already has the message,
    # after the tool result.
    assert requests[0]["reply"].get("tool", [None])[0] == "bash"
    second = requests[1]["messages"]
    roles = [m["role"] for m in second]
    tool_at = roles.index("tool")
    framed = [i for i, m in enumerate(second) if m["role"] == "user" and "also check the docs" in message_text(m)]
    assert framed and framed[0] > tool_at, roles
    assert AUTHORITY_LINE in message_text(second[framed[0]])
    assert requests[1]["reply"]["text"] == "after the slow tool"
    items = agent_items(daemon.entries(kid))
    assert len(items) == 1 and items[0]["details"]["kind"] == "message"


def test_five_messages_that_reach_pi_together_carry_the_notice_once(pi_kit, tmp_path):
    """Issue 42 ("what a message costs in tokens"): five messages held during a slow tool
    reach pi as one steer batch; the next model request has the five envelopes and the
    no-user-authority notice once, after the last. The session file keeps each item as
    framed, its notice included. (pi takes steered messages into its next model call all
    at once with ``steeringMode: "all"``; its default, one at a time, gives each a model
    call of its own, where each keeps its notice.)"""
    gate = tmp_path / "gate"
    fake = pi_kit.fake(slow_tool_scenario(gate))
    pi_kit.update_settings({"steeringMode": "all"})
    daemon = pi_kit.daemon()
    words = [f"note {n}" for n in range(1, 6)]

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "do the slow thing", "slowpoke", host="pi")
            await in_thread(wait_until, lambda: len(fake.requests()) >= 1, 60, what="the first model call")
            for text in words:
                ok, answer, data = await send(lead, kid, text)
                assert ok and data["result"] == "delivered", answer
            worker_log = daemon.paths.jobs_dir / f"{kid}.log"
            await in_thread(
                wait_until, lambda: worker_log.read_text().count("arrived during a run") == 5, 60, what="the worker to hold all five"
            )
            gate.write_text("go")
            await in_thread(daemon.wait_job, kid, timeout=60)
            return kid

    kid = run_async(story)
    second = [r for r in fake.requests() if r["model"] == "fake-model"][1]
    texts = [message_text(m) for m in second["messages"]]
    framed = framed_inputs(second)
    assert [next(w for w in words if f"\n{w}\n" in text) for text in framed] == words
    # One notice in the whole request, after the last envelope; each envelope closed.
    assert sum(text.count(NO_USER_AUTHORITY) for text in texts) == 1
    assert framed[-1].endswith("</agent-message>\n" + NO_USER_AUTHORITY)
    assert all(text.rstrip("\n").endswith("</agent-message>") for text in framed[:-1])
    # Stored as framed: every item in the session file keeps its own notice.
    items = agent_items(daemon.entries(kid))
    assert len(items) == 5 and all(item["content"].endswith(NO_USER_AUTHORITY) for item in items)


def test_five_messages_for_an_idle_pi_are_one_prompt_with_one_notice(pi_kit, tmp_path):
    """Five follow-ups (``urgent: false``) wait for a slow run to end, then reach the idle
    pi as one batch: with pi's own steering mode (one at a time), one model request holds
    the five envelopes and the notice once, and the child answers them in one turn."""
    gate = tmp_path / "gate"
    fake = pi_kit.fake(slow_tool_scenario(gate, default="ok"))
    daemon = pi_kit.daemon()
    words = [f"later {n}" for n in range(1, 6)]

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "do the slow thing", "slowpoke", host="pi")
            await in_thread(wait_until, lambda: len(fake.requests()) >= 1, 60, what="the first model call")
            for text in words:
                ok, answer, data = await lead.call_tool("roost_send", {"to": kid, "message": text, "urgent": False})
                assert ok and data["result"] == "delivered", answer
            worker_log = daemon.paths.jobs_dir / f"{kid}.log"
            await in_thread(
                wait_until, lambda: worker_log.read_text().count("arrived during a run") == 5, 60, what="the worker to hold all five"
            )
            gate.write_text("go")
            await in_thread(wait_until, lambda: len(agent_items(daemon.entries(kid))) == 5, 60, what="all five in the session")
            await in_thread(daemon.wait_job, kid, timeout=60)
            return kid

    kid = run_async(story)
    requests = [r for r in fake.requests() if r["model"] == "fake-model"]
    with_items = [r for r in requests if framed_inputs(r)]
    # One request took them all (the first after the slow run), in order, one notice.
    first = with_items[0]
    framed = framed_inputs(first)
    assert [next(w for w in words if f"\n{w}\n" in text) for text in framed] == words
    assert sum(message_text(m).count(NO_USER_AUTHORITY) for m in first["messages"]) == 1
    assert framed[-1].endswith(NO_USER_AUTHORITY)
    # Answered in one turn: no request after it but the ones its own reply made.
    assert len(requests) == 3, [len(framed_inputs(r)) for r in requests]
    items = agent_items(daemon.entries(kid))
    assert [item["details"]["seq"] for item in items] == sorted(item["details"]["seq"] for item in items)
    assert all(item["content"].endswith(NO_USER_AUTHORITY) for item in items)


def test_a_reaped_pi_job_restarts_with_its_session_and_holds_the_message_once(pi_kit, write_config, tmp_path):
    write_config({"reapAfterSeconds": 0.5})
    fake = pi_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = pi_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first task", "sleeper", host="pi")
            await in_thread(daemon.wait_job, kid, timeout=60)
            await in_thread(daemon.wait_reaped, kid)
            _ok, text, data = await send(lead, kid, "wake up and look")
            assert data["result"] == "started", text
            await in_thread(wait_until, lambda: daemon.job(kid)["pending"] == 0 and daemon.job(kid)["state"] != "running", 60, what="the message handled")
            return kid

    kid = run_async(story)
    entries = daemon.entries(kid)
    items = agent_items(entries)
    assert [i["details"]["kind"] for i in items] == ["message"]
    assert "wake up and look" in items[0]["content"]
    assert [message_text(e["message"]) for e in user_messages(entries)] == ["first task"]
    # One file, one header: the second pi resumed it (--session), it did not start over.
    assert sum(1 for e in entries if e.get("type") == "session") == 1
    last = [r for r in fake.requests() if r["model"] == "fake-model"][-1]
    texts = [message_text(m) for m in last["messages"]]
    assert any("first task" in t for t in texts) and any("wake up and look" in t for t in texts)
    log = (daemon.paths.jobs_dir / f"{kid}.log").read_text()
    assert log.count("starting pi") == 2 and "--session" in log
    # Exactly once in the file as the agent item, never as user input.
    assert sum(json.dumps(e).count("wake up and look") for e in entries if e.get("type") != "message" or e["message"]["role"] == "user") == 1


def test_a_dialog_is_answered_by_a_reply_while_agent_items_wait(pi_kit, tmp_path):
    from pikit import KIT

    pi_kit.env["ROOST_PI_ARGS"] = f"-e {KIT / 'confirm-tool.ts'}"
    scenario = {
        "run": [{"steps": [{"dialog": "Deploy to prod?"}, {"say": "deploy step done"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "deploy it", "deployer", host="pi")
            await in_thread(wait_until, lambda: daemon.job(kid)["dialog"], 60, what="the dialog")
            row = daemon.job(kid)
            assert row["state"] == "needs_input" and "Deploy to prod?" in row["question"]
            _ok, text, data = await send(lead, kid, "please hurry")
            assert data["waiting"] == "waiting on a dialog", text
            assert agent_items(daemon.entries(kid)) == []  # it waits while the dialog is open
            daemon.call("reply", job=kid, text="yes")
            await in_thread(daemon.wait_job, kid, timeout=60)
            return kid

    kid = run_async(story)
    entries = daemon.entries(kid)
    results = [e["message"] for e in entries if e.get("type") == "message" and e["message"]["role"] == "toolResult"]
    assert [message_text(r) for r in results if r["toolName"] == "confirm"] == ["confirmed"]
    marks = [e["data"] for e in entries if e.get("type") == "custom" and e.get("customType") == "pi-roost-seq"]
    assert len(marks) == 1 and marks[0]["dialog"] is True
    assert [i["details"]["kind"] for i in agent_items(entries)] == ["message"]
    # The answer never became a user message; the waiting message reached the model after it.
    assert [message_text(e["message"]) for e in user_messages(entries)] == ["deploy it"]
    later = [r for r in fake.requests() if any("please hurry" in message_text(m) for m in r["messages"])]
    assert later


def test_agent_tools_off_gives_pi_no_roost_tools(pi_kit, write_config):
    write_config({"agentTools": False})
    fake = pi_kit.fake({"default": {"steps": [{"say": "plain"}]}})
    daemon = pi_kit.daemon()
    job = daemon.start_job("no tools please", host="pi")
    assert daemon.wait_job(job, timeout=60)["state"] == "done"
    (request,) = fake.requests()
    assert not [name for name in request["tools"] if name.startswith("roost_")]
    assert "bash" in request["tools"]
