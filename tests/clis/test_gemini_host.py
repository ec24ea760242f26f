"""roost's ``gemini`` host against the pinned Gemini CLI and the fake Gemini API: a job
runs headless Gemini CLI in its own session, the roost tools reach it through ``roost mcp``,
items arrive mid-turn through its hooks, exactly once, and ``roost log`` renders it."""

from __future__ import annotations

import json

import pytest
from clifake import scripted, users


def test_a_gemini_job_runs_its_task_with_roosts_tools_and_renders_in_roost_log(gemini_host):
    fake = gemini_host.start_fake({"default": {"steps": [{"say": "Done: {input}"}]}})
    daemon = gemini_host.daemon()
    started = gemini_host.roost("start", "--host", "gemini", "--name", "builder", "--json", "build the thing")
    assert started.returncode == 0, started.stderr
    job = json.loads(started.stdout)["id"]
    row = daemon.wait_job(job, timeout=90)
    assert row["state"] == "done", row
    assert row["summary"] == "Done: build the thing"
    [request] = scripted(fake)
    assert users(request) == ["build the thing"]
    names = {d["name"] for group in request["body"]["tools"] for d in group.get("functionDeclarations", [])}
    assert {"mcp_roost_roost_agents", "mcp_roost_roost_send", "mcp_roost_roost_spawn"} <= names
    # roost log: the prompt (without roost's marker line) and the answer.
    assert gemini_host.log_lines(job) == ["› you: build the thing", "assistant: Done: build the thing"]
    # The usage of the session's answers counts toward the job.
    assert (daemon.job(job)["usage"] or {}).get("tokens") == 110
    # Nothing of the run is left: no process runs in the job's Gemini home.
    import proctools

    from roost_plugins.gemini.transcript import job_home

    assert not proctools.with_environ("GEMINI_CLI_HOME", str(job_home(daemon.record(job)["session"])))


# ---------------------------------------------------------------------------- agent items

from conftest import wait_until  # noqa: E402
from fg import in_thread, reap_and_wake, run_async, send, send_during_last_answer, session, spawn  # noqa: E402

from roost_core.hosts.handover import marked_seqs  # noqa: E402
from roost_core.policy import NO_USER_AUTHORITY  # noqa: E402

AUTHORITY_LINE = NO_USER_AUTHORITY.splitlines()[0]


def handed(lines):
    """roost's hand-overs in a Gemini session: (where, seqs, text) of each user text and
    each tool result's hook context that starts with roost's marker."""
    from roost_plugins.gemini.transcript import hook_context

    found = []
    for line in lines:
        if line.get("type") != "user":
            continue
        for part in line.get("content") or []:
            if "text" in part and marked_seqs(part["text"]):
                found.append(("prompt", marked_seqs(part["text"]), part["text"]))
            elif "functionResponse" in part and marked_seqs(hook_context(part["functionResponse"])):
                found.append(("AfterTool", marked_seqs(hook_context(part["functionResponse"])), hook_context(part["functionResponse"])))
    return found


def test_a_gemini_child_gets_a_message_mid_turn_and_reports_once(gemini_host, write_config, tmp_path):
    write_config({"agentSpawnHosts": ["gemini"]})
    gate = tmp_path / "gate"
    fake = gemini_host.start_fake({
        "run": [{"steps": [{"agents": {}}, {"wait_for": str(gate)}, {"say": "after the tools"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    })
    daemon = gemini_host.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            # The parent's own roost_spawn, choosing the child's host.
            ok, text, data = await lead.call_tool("roost_spawn", {"task": "do the slow thing", "name": "slowpoke", "host": "gemini"})
            assert ok, text
            kid = data["id"]
            await in_thread(wait_until, lambda: len(scripted(fake)) >= 2, 90, what="the slow tool's call")
            ok, text, data = await send(lead, kid, "also check the docs")
            assert ok and data["result"] == "delivered", text
            assert daemon.received(kid, "also check the docs")["seen"] is None  # held until the hook
            gate.write_text("go")
            await lead.wait_for_delivery(1, timeout=90)
            await in_thread(daemon.wait_job, kid, timeout=90)
            # Seen: Gemini CLI's next model answer after the hand-over (issue 42.4's receipt).
            receipt = await in_thread(daemon.wait_seen, kid, "also check the docs")
            assert receipt["state"] == "seen" and receipt["seen"] >= receipt["created"], receipt
            return kid, list(lead.delivered)

    kid, delivered = run_async(story)
    # The job's roost tools ran through its worker: it saw its parent.
    listing = scripted(fake)[1]
    assert any(m["role"] == "tool" and "lead" in m["content"] and "[parent]" in m["content"] for m in listing["chat"]), listing["chat"]
    # Handed over once, after the slow tool's result (AfterTool), with its marker.
    lines = gemini_host.session_lines(kid)
    hand_overs = handed(lines)
    assert [(where, len(seqs)) for where, seqs, _ in hand_overs] == [("prompt", 1), ("AfterTool", 1)], hand_overs
    assert "also check the docs" in hand_overs[1][2] and AUTHORITY_LINE in hand_overs[1][2]
    # The model read it mid-turn: in the request after the tool, as an input after it.
    last = scripted(fake)[-1]
    assert any("also check the docs" in u for u in users(last)) and last["reply"]["text"] == "after the tools"
    # The report reached the parent once, framed; nothing waits for the child.
    assert [d["kind"] for d in delivered] == ["report"]
    assert "after the tools" in delivered[0]["content"] and AUTHORITY_LINE in delivered[0]["content"]
    assert delivered[0]["fromName"] == "slowpoke" and delivered[0]["relation"] == "child"
    assert daemon.job(kid)["pending"] == 0
    # roost log shows the agent message where the model read it.
    shown = gemini_host.log_lines(kid)
    assert shown[0] == "› you: do the slow thing" and shown[-1] == "assistant: after the tools"
    assert any(line.startswith("✉ message from lead (parent)") for line in shown), shown
    # roost agents names the child's host.
    agents = gemini_host.roost("agents")
    assert agents.returncode == 0 and any("slowpoke" in line and "[gemini]" in line for line in agents.stdout.splitlines()), agents.stdout


def test_an_item_that_arrives_during_the_last_answer_denies_the_stop(gemini_host, tmp_path):
    fake = gemini_host.start_fake({
        "run": [{"steps": [{"shell": "echo one tool"}, {"say": "final words"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    })
    fake.hold = lambda reply: reply.get("text") == "final words"
    daemon = gemini_host.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "finish up", "closer", host="gemini")
            await send_during_last_answer(daemon, lead, fake, kid, "one more thing")
            return kid, list(lead.delivered)

    kid, delivered = run_async(story)
    # AfterAgent denied the stop with it: a new prompt in the same gemini run.
    hand_overs = handed(gemini_host.session_lines(kid))
    assert [where for where, _, _ in hand_overs] == ["prompt", "prompt"]
    assert "one more thing" in hand_overs[1][2]
    log = (daemon.paths.jobs_dir / f"{kid}.log").read_text()
    assert log.count("starting gemini") == 1
    # The run went on with it, and reported once at its real end.
    assert scripted(fake)[-1]["reply"]["text"].startswith("ok: ")
    assert [d["kind"] for d in delivered] == ["report"]
    assert "one more thing" in delivered[0]["content"]


def test_a_reaped_gemini_job_resumes_its_session_and_holds_the_message_once(gemini_host, write_config, tmp_path):
    write_config({"reapAfterSeconds": 0.5})
    fake = gemini_host.start_fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = gemini_host.daemon()
    kid = reap_and_wake(daemon, tmp_path, "gemini")
    log = (daemon.paths.jobs_dir / f"{kid}.log").read_text()
    assert log.count("starting gemini") == 2 and "--resume" in log
    # One session: the second run resumed it and the model saw both turns.
    last = scripted(fake)[-1]
    assert users(last)[0] == "first task" and "wake up and look" in users(last)[-1]
    lines = gemini_host.session_lines(kid)
    assert [len(seqs) for _, seqs, _ in handed(lines)] == [1, 1]
    assert sum(json.dumps(line).count("wake up and look") for line in lines if line.get("type") == "user") == 1
    # The usage goes on from what the first run spent: every answer of both.
    spent = 110 * len(scripted(fake))
    wait_until(lambda: (daemon.job(kid)["usage"] or {}).get("tokens") == spent, 30, what="the job's usage over both runs")


def test_a_worker_killed_after_the_hand_over_never_delivers_the_message_twice(gemini_host, tmp_path):
    import proctools

    gate = tmp_path / "gate"
    fake = gemini_host.start_fake({
        "run": [{"steps": [{"wait_for": str(gate)}, {"say": "after the tools"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    })
    fake.hold = lambda reply: reply.get("text") == "after the tools"
    daemon = gemini_host.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "do the slow thing", "slowpoke", host="gemini")
            await in_thread(wait_until, lambda: len(scripted(fake)) >= 1, 90, what="the slow tool's call")
            ok, text, _data = await send(lead, kid, "also check the docs")
            assert ok, text
            gate.write_text("go")
            # The hook handed it over and the model is answering: the session holds it.
            assert await in_thread(fake.holding.wait, 90), "the answer after the tool never started"
            assert [where for where, _, _ in handed(gemini_host.session_lines(kid))] == ["prompt", "AfterTool"]
            worker = daemon.job(kid)["workerPid"]
            everything = proctools.tree(worker)
            proctools.kill9(worker)
            await in_thread(wait_until, lambda: not any(proctools.alive(p) for p in everything), 60, what="the worker and gemini gone")
            fake.release.set()
            await in_thread(daemon.wait_reaped, kid)
            # The next message starts a new worker on the same session.
            ok, text, data = await send(lead, kid, "and the tests")
            assert ok and data["result"] == "started", text
            # The parent hears of the run the kill ended, then of the new one.
            await lead.wait_for_delivery(2, timeout=90)
            await in_thread(daemon.wait_job, kid, timeout=60)
            return kid, list(lead.delivered), everything

    kid, delivered, everything = run_async(story)
    lines = gemini_host.session_lines(kid)
    hand_overs = handed(lines)
    # Once in the session: the new worker read it there and did not hand it over again.
    assert [where for where, _, _ in hand_overs] == ["prompt", "AfterTool", "prompt"], hand_overs
    assert sum(text.count("also check the docs") for _, _, text in hand_overs) == 1
    assert "and the tests" in hand_overs[2][2]
    assert [d["kind"] for d in delivered] == ["report", "report"]
    assert "state: failed" in delivered[0]["content"] and "ok: and the tests" in delivered[1]["content"]
    assert daemon.job(kid)["pending"] == 0
    assert not any(proctools.alive(p) for p in everything)


# ------------------------------------------------------------------ the user's own Gemini CLI


def test_a_users_gemini_cli_joins_through_install_and_gets_a_message_mid_turn(gemini_host, write_config, tmp_path):
    write_config({"agentExternalMessages": True})
    gate = tmp_path / "gate"
    fake = gemini_host.start_fake({
        "run": [{"steps": [{"agents": {}}, {"wait_for": str(gate)}, {"say": "after the tools"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    })
    daemon = gemini_host.daemon()
    installed = gemini_host.roost("gemini", "install")
    assert installed.returncode == 0, installed.stderr
    user = gemini_host.user_gemini("look around")

    async def story():
        try:
            return await talk()
        finally:
            gate.write_text("go")
            await in_thread(gemini_host.finish, user)

    async def talk():
        async with session(daemon, tmp_path) as lead:
            # It joined with its first roost tool call (roost_agents), as the folder's name.
            await in_thread(wait_until, lambda: len(scripted(fake)) >= 2, 90, what="the slow tool's call")
            rows = {row["name"]: row for row in (await lead.call("agents"))["agents"]}
            assert "work" in rows and rows["work"]["host"] == "gemini", rows
            ok, text, _data = await send(lead, rows["work"]["id"], "also check the docs")
            assert ok, text

    run_async(story)
    # AfterTool handed it over (roost gemini hook -> the session's roost mcp server).
    last = scripted(fake)[-1]
    assert any("also check the docs" in u for u in users(last)) and last["reply"]["text"] == "after the tools"
    tool_output = last["body"]["contents"][-1]["parts"][0]["functionResponse"]["response"]["output"]
    assert "<hook_context>[roost seq" in tool_output
    # Acknowledged once the session's file showed it: the daemon holds nothing for the peer.
    sent = daemon.call("agents")["agents"]
    work = [row for row in sent if row["name"] == "work"]
    assert work and all(row["pending"] == 0 for row in work), sent


def gemini_agents(kit) -> list[dict]:
    """The rows ``roost agents --json`` shows for Gemini CLI sessions."""
    shown = kit.roost("agents", "--json")
    assert shown.returncode == 0, shown.stderr
    return [row for row in json.loads(shown.stdout) if row.get("host") == "gemini"]


def without_before_agent(kit) -> None:
    """Take ``BeforeAgent`` out of the user's Gemini settings: an install made before roost
    registered it."""
    path = kit.cli.home / ".gemini" / "settings.json"
    settings = json.loads(path.read_text())
    settings["hooks"].pop("BeforeAgent", None)
    path.write_text(json.dumps(settings))


@pytest.mark.parametrize("install", ["current", "without BeforeAgent"])
def test_a_users_gemini_cli_is_one_agent_from_its_first_roost_call(gemini_host, write_config, tmp_path, install):
    # Issue 49.A4: the first roost tool call registered without a session, the next hook
    # named the session and made a second agent; an answer to the first id was lost.
    # BeforeAgent names the session before the first call; without it (an older install)
    # the peer keeps the id it joined with once a later hook names the session.
    write_config({"agentExternalMessages": True})
    gate = tmp_path / "gate"
    daemon = gemini_host.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            lead_id = await lead.ensure_registered()
            fake = gemini_host.start_fake({
                "run": [{"steps": [{"send": {"to": lead_id, "message": "hello from work"}}, {"agents": {}},
                                   {"wait_for": str(gate)}, {"say": "after the tools"}]}],
                "default": {"steps": [{"say": "ok: {input}"}]},
            })
            installed = gemini_host.roost("gemini", "install")
            assert installed.returncode == 0, installed.stderr
            if install != "current":
                without_before_agent(gemini_host)
            user = gemini_host.user_gemini("look around")
            try:
                # Its first roost call (roost_send) names it as it will stay.
                [hello] = await lead.wait_for_delivery(1, timeout=90)
                first = hello["from"]
                assert [row["id"] for row in await in_thread(gemini_agents, gemini_host)] == [first]
                # Later roost calls and hooks (roost_agents, the slow tool): the same one agent.
                await in_thread(wait_until, lambda: len(scripted(fake)) >= 3, 90, what="the slow tool's call")
                assert [row["id"] for row in await in_thread(gemini_agents, gemini_host)] == [first]
                # An answer to the first id reaches the session that is still working.
                ok, text, data = await send(lead, first, "also check the docs")
                assert ok and data["result"] == "delivered", text
            finally:
                gate.write_text("go")
                events = await in_thread(gemini_host.finish, user)
            return fake, first, events

    fake, first, events = run_async(story)
    last = scripted(fake)[-1]
    assert any("also check the docs" in u for u in users(last)) and last["reply"]["text"] == "after the tools"
    assert [row["id"] for row in gemini_agents(gemini_host)] == [first]
    if install == "current":
        # Named after Gemini CLI's session from its first call (a resume is the same agent).
        from geminikit import session_id

        from roost_core.identity import foreground_id

        assert first == foreground_id(session_id(events))


def test_a_users_reply_to_a_running_gemini_job_reaches_the_model_as_the_users_words(gemini_host, tmp_path):
    # Issue 49.A3: a reply during a run went in as an AfterTool hook's context, beside
    # agent items under the notice that says they are not from the user, and roost log
    # never showed it.
    gate = tmp_path / "gate"
    fake = gemini_host.start_fake({
        "run": [{"match": "slow", "steps": [{"wait_for": str(gate)}, {"say": "after the tool"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    })
    daemon = gemini_host.daemon()
    started = gemini_host.roost("start", "--host", "gemini", "--name", "builder", "--json", "do the slow thing")
    assert started.returncode == 0, started.stderr
    job = json.loads(started.stdout)["id"]
    wait_until(lambda: len(scripted(fake)) >= 1, 90, what="the slow tool's call")
    replied = gemini_host.roost("reply", job, "and tidy up")
    assert replied.returncode == 0, replied.stderr
    gate.write_text("go")
    row = daemon.wait_job(job, "done", timeout=120)
    assert row["summary"] == "ok: and tidy up", row
    # The model got it once, as a user text of its own: never in a tool's response (a
    # hook's context), never beside the agent-message notice.
    requests = scripted(fake)
    last = requests[-1]["body"]["contents"]
    holding = [part for content in last for part in content.get("parts") or [] if "and tidy up" in json.dumps(part)]
    assert len(holding) == 1 and "text" in holding[0], holding
    assert AUTHORITY_LINE not in holding[0]["text"]
    assert all("and tidy up" not in json.dumps(part) for request in requests
               for content in request["body"]["contents"] for part in content.get("parts") or [] if "functionResponse" in part)
    assert [u for u in users(requests[-1]) if "and tidy up" in u] == ["and tidy up"]
    # Gemini CLI's session holds it once, as a prompt; roost log shows it as the user's line.
    hand_overs = handed(gemini_host.session_lines(job))
    assert [where for where, _, _ in hand_overs] == ["prompt", "prompt"] and "and tidy up" in hand_overs[1][2], hand_overs
    shown = gemini_host.log_lines(job)
    assert shown.count("› you: and tidy up") == 1 and shown[-1] == "assistant: ok: and tidy up", shown
