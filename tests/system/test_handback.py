"""Spawn and hand-back (M9b) through real processes: reports, routing, caps, loops."""

from __future__ import annotations

import os
import signal

import proctools
import pytest
from conftest import agent_items, wait_until
from fg import in_thread, run_async, send, session, spawn, taken

from roost_plugins.envelope import parse_envelopes

QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}


def reports(entries) -> list[dict]:
    out = []
    for entry in agent_items(entries):
        if entry["details"]["kind"] == "report":
            (envelope,) = parse_envelopes(entry["content"])
            out.append({"from": entry["details"]["fromName"], "body": envelope["body"], "relation": envelope["relation"]})
    return out


def runs(entries) -> list[dict]:
    """Each answer the scripted model gave to new input: runs, and the segments in which a
    run answered items steered in at its last boundary."""
    return [e for e in entries if e.get("type") == "custom" and e.get("customType") in ("roost-run", "roost-run-segment")]


@pytest.mark.smoke
def test_parent_gets_each_childs_report_once_and_answers_a_question(daemon, tmp_path):
    gate_b, gate_c = tmp_path / "gate-b", tmp_path / "gate-c"
    parent_scenario = {
        "run": [
            {
                "steps": [
                    {"spawn": {"task": "quick", "name": "kid-a", "model": "quick"}},
                    {"spawn": {"task": "slow", "name": "kid-b", "model": "slow"}},
                    {"spawn": {"task": "asker", "name": "kid-c", "model": "asker"}},
                    {"say": "spawned three"},
                ]
            },
            {"kind": "report", "match": "question: Which DB", "steps": [{"send": {"to": "{from}", "message": "use postgres"}}, {"say": "answered"}]},
        ],
        "default": {"steps": [{"say": "noted {from_name}"}]},
        "models": {
            "quick": {"default": {"steps": [{"say": "A finished quickly"}]}},
            "slow": {"run": [{"steps": [{"wait_for": str(gate_b)}, {"say": "B finished slowly"}]}]},
            "asker": {"run": [{"steps": [{"wait_for": str(gate_c)}, {"ask": "Which DB?"}]}, {"steps": [{"say": "C finished with {input}"}]}]},
        },
    }
    parent = daemon.start_job("delegate", scenario=parent_scenario, name="lead")
    wait_until(lambda: [r["from"] for r in reports(daemon.entries(parent))] == ["kid-a"], what="kid-a's report")
    gate_c.write_text("go")
    wait_until(lambda: any("C finished with use postgres" in r["body"] for r in reports(daemon.entries(parent))), what="kid-c's second report")
    gate_b.write_text("go")
    wait_until(lambda: len(reports(daemon.entries(parent))) == 4, what="four reports")
    daemon.wait_job(parent)
    got = reports(daemon.entries(parent))
    assert [r["from"] for r in got] == ["kid-a", "kid-c", "kid-c", "kid-b"]
    assert got[0]["body"] == "state: done\n\nA finished quickly"
    assert got[1]["body"].startswith("state: needs_input\nquestion: Which DB?")
    assert got[2]["body"] == "state: done\n\nC finished with use postgres"
    assert got[3]["body"] == "state: done\n\nB finished slowly"
    assert {r["relation"] for r in got} == {"child"}
    rows = {row["name"]: row for row in daemon.call("jobs")["jobs"]}
    assert rows["kid-a"]["parent"] == parent and rows["kid-a"]["parentSession"] == rows["lead"]["session"]
    # The parent's answer went to kid-c as a message from its parent.
    (answer,) = agent_items(daemon.entries(rows["kid-c"]["id"]))
    assert parse_envelopes(answer["content"])[0]["relation"] == "parent"


@pytest.mark.smoke
def test_two_siblings_that_answer_everything_go_quiet_by_the_hop_limit(daemon, tmp_path):
    echo = {"default": {"steps": [{"send": {"to": "{from}", "message": "re: {input}"}}]}}

    async def story():
        async with session(daemon, tmp_path) as lead:
            s2 = await spawn(lead, "wait", "s2", scenario={"run": [{"steps": [{"say": "ready"}]}], **echo})
            await in_thread(daemon.wait_job, s2)
            s1 = await spawn(lead, "start", "s1", scenario={"run": [{"steps": [{"send": {"to": "s2", "message": "ping"}}]}], **echo})
            # Quiet jobs have handed back every report; the lead has taken each one.
            await in_thread(wait_until, lambda: quiet(daemon, s1, s2) and taken(daemon, lead), what="both quiet")
            total = len(runs(daemon.entries(s1))) + len(runs(daemon.entries(s2)))
            # The task item is hop 1; messages hop 2..8 went through; hop 9 was refused.
            assert total == 2 + 7
            refusals = tool_results(daemon.entries(s1)) + tool_results(daemon.entries(s2))
            assert sum("error (hop_limit)" in text for text in refusals) == 1
            # Only the two task runs reported: no report chain between siblings.
            assert [e["kind"] for e in lead.delivered].count("report") == 2

    run_async(story)


def test_rate_limit_holds_when_hops_are_allowed(daemon_factory, write_config, tmp_path):
    write_config({"agentMaxHops": 10_000, "agentMessagesPerMinute": 5})
    daemon = daemon_factory().start()
    echo = {"default": {"steps": [{"send": {"to": "{from}", "message": "re"}}]}}

    async def story():
        async with session(daemon, tmp_path) as lead:
            s2 = await spawn(lead, "wait", "s2", scenario={"run": [{"steps": [{"say": "ready"}]}], **echo})
            await in_thread(daemon.wait_job, s2)
            s1 = await spawn(lead, "start", "s1", scenario={"run": [{"steps": [{"send": {"to": "s2", "message": "ping"}}]}], **echo})
            # Quiet jobs have handed back every report; the lead has taken each one.
            await in_thread(wait_until, lambda: quiet(daemon, s1, s2) and taken(daemon, lead), what="both quiet")
            texts = tool_results(daemon.entries(s1)) + tool_results(daemon.entries(s2))
            assert sum(t.startswith("delivered") for t in texts) == 10  # 5 per sender a minute
            assert sum("error (rate_limited)" in t for t in texts) == 1

    run_async(story)


def quiet(daemon, *jobs) -> bool:
    """One snapshot: nobody running and nothing queued means nothing is in flight."""
    rows = {row["id"]: row for row in daemon.call("jobs")["jobs"]}
    return all(rows[job]["state"] != "running" and rows[job]["pending"] == 0 for job in jobs)


def tool_results(entries) -> list[str]:
    return [e["message"]["content"][0]["text"] for e in entries if e.get("type") == "message" and e["message"].get("role") == "toolResult"]


# ---------------------------------------------------------------------------- caps


def test_children_cap(daemon_factory, write_config, tmp_path):
    write_config({"agentMaxChildren": 2})
    daemon = daemon_factory().start()
    hold = {"run": [{"steps": [{"wait_for": str(tmp_path / "never")}]}]}

    async def story():
        async with session(daemon, tmp_path) as lead:
            for n in range(2):
                await spawn(lead, f"t{n}", f"k{n}", scenario=hold)
            ok, text, _ = await lead.call_tool("roost_spawn", {"task": "t2"})
            assert not ok and text.startswith("error (children_limit)") and "2" in text

    run_async(story)


def test_depth_cap(daemon, tmp_path):
    # Each level spawns the next from the same nested scenario: depth 1, 2, 3, then 4 is refused.
    # (Named from the task, so each gets a free name: deeper, deeper-2, deeper-3.)
    level: dict = {"run": [{"steps": [{"spawn": {"task": "deeper", "model": "next"}}, {"say": "spawned"}]}]}
    for _ in range(4):
        level = {"run": level["run"], "models": {"next": level}}
    job = daemon.start_job("root", scenario=level, name="root")

    def chain_done():
        rows = daemon.call("jobs")["jobs"]
        return len(rows) == 4 and all(r["state"] != "running" and r["pending"] == 0 for r in rows) and rows

    rows = wait_until(chain_done, what="chain of 4")
    deepest = max(rows, key=lambda r: r["depth"])
    assert deepest["depth"] == 3
    refused = [t for t in tool_results(daemon.entries(deepest["id"])) if t.startswith("error")]
    assert len(refused) == 1 and refused[0].startswith("error (depth_limit)") and "agentMaxDepth is 3" in refused[0]
    assert job in {r["id"] for r in rows}


def test_tree_and_global_caps(daemon_factory, write_config, tmp_path):
    write_config({"agentMaxPerTree": 2, "agentMaxSpawned": 3})
    daemon = daemon_factory().start()
    hold = {"run": [{"steps": [{"wait_for": str(tmp_path / "never")}]}]}

    async def story():
        async with session(daemon, tmp_path, name="one") as one, session(daemon, tmp_path, name="two") as two:
            await spawn(one, "a", "a", scenario=hold)
            await spawn(one, "b", "b", scenario=hold)
            _ok, text, _ = await one.call_tool("roost_spawn", {"task": "c"})
            assert text.startswith("error (tree_limit)")
            await spawn(two, "d", "d", scenario=hold)
            _ok, text, _ = await two.call_tool("roost_spawn", {"task": "e"})
            assert text.startswith("error (spawn_limit)")

    run_async(story)


def test_spawn_rate_window_with_a_controllable_clock(daemon_factory, write_config, tmp_path):
    write_config({"agentSpawnsPerMinute": 2})
    daemon = daemon_factory(ROOST_TEST_HOOKS="1").start()

    # The daemon's clock stands still from here: only the test moves it.
    daemon.call("test_clock", advance=0.0)

    async def story():
        async with session(daemon, tmp_path) as lead:
            await spawn(lead, "a", "a", scenario=QUIET)
            await spawn(lead, "b", "b", scenario=QUIET)
            ok, text, _ = await lead.call_tool("roost_spawn", {"task": "c"})
            assert text.startswith("error (spawn_rate_limited)")
            daemon.call("test_clock", advance=59.0)
            ok, text, _ = await lead.call_tool("roost_spawn", {"task": "c"})
            assert text.startswith("error (spawn_rate_limited)")
            daemon.call("test_clock", advance=1.5)
            ok, text, _ = await lead.call_tool("roost_spawn", {"task": "c"})
            assert ok, text

    run_async(story)


# ---------------------------------------------------------------------------- routing


def test_report_wakes_a_reaped_parent(daemon_factory, write_config, tmp_path):
    write_config({"reapAfterSeconds": 0.3})
    daemon = daemon_factory().start()
    gate = tmp_path / "gate"
    parent = daemon.start_job("p", name="p", scenario={
        "run": [{"steps": [{"spawn": {"task": "work", "name": "kid", "model": "kid"}}, {"say": "waiting"}]}],
        "default": {"steps": [{"say": "got {from_name}"}]},
        "models": {"kid": {"run": [{"steps": [{"wait_for": str(gate)}, {"say": "kid done"}]}]}},
    })
    wait_until(lambda: not daemon.job(parent)["live"] and daemon.job(parent)["state"] == "done", what="parent reaped")
    gate.write_text("go")
    wait_until(lambda: len(reports(daemon.entries(parent))) == 1, what="report in the parent")
    assert reports(daemon.entries(parent))[0]["body"].endswith("kid done")


def test_report_to_a_stopped_parent_is_queued_not_woken(daemon, tmp_path):
    gate = tmp_path / "gate"
    parent = daemon.start_job("p", name="p", scenario={
        "run": [{"steps": [{"spawn": {"task": "work", "name": "kid", "model": "kid"}}, {"say": "waiting"}]}],
        "models": {"kid": {"run": [{"steps": [{"wait_for": str(gate)}, {"say": "kid done"}]}]}},
    })
    daemon.wait_job(parent)
    kid = next(r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] == "kid")
    daemon.call("stop", job=parent)
    daemon.wait_reaped(parent)
    gate.write_text("go")
    daemon.wait_job(kid, "done")
    wait_until(lambda: daemon.job(parent)["pending"] == 1, what="report queued")
    row = daemon.job(parent)
    assert row["state"] == "stopped" and not row["live"]
    assert reports(daemon.entries(parent)) == []


async def keep_a_report(daemon, tmp_path) -> str:
    """A child that settles once its parent is gone: its report is kept on it. Its id."""
    gate = tmp_path / "gate"
    async with session(daemon, tmp_path) as lead:
        kid = await spawn(lead, "work", "kid", scenario={"run": [{"steps": [{"wait_for": str(gate)}, {"say": "kid done"}]}]})
        lead_id = await lead.ensure_registered()
    # Only once the daemon has seen the parent go is the report kept on the kid (one
    # routed before is pushed to the closing connection and held for the session).
    await in_thread(wait_until, lambda: not any(r["live"] for r in daemon.call("agents")["agents"] if r["id"] == lead_id), what="the lead gone")
    gate.write_text("go")
    await in_thread(daemon.wait_job, kid, "done")
    await in_thread(wait_until, lambda: daemon.job(kid)["undeliveredReport"], what="kept")
    return kid


async def parent_back_gets_the_report(daemon, tmp_path, kid: str) -> None:
    async with session(daemon, tmp_path) as back:
        await back.ensure_registered()
        await back.wait_for_delivery(1)
        assert back.delivered[0]["kind"] == "report" and "kid done" in back.delivered[0]["content"]
    assert daemon.job(kid)["undeliveredReport"] is False


def test_report_kept_while_the_parent_is_gone_and_retried_when_it_is_back(daemon, tmp_path):
    async def story():
        kid = await keep_a_report(daemon, tmp_path)
        await parent_back_gets_the_report(daemon, tmp_path, kid)

    run_async(story)


def test_report_kept_on_a_hibernated_child_across_a_restart_reaches_the_parent(daemon_factory, write_config, tmp_path):
    """The daemon finds the reports its children keep when it loads their records (a
    registration looks only at those): with the child hibernated, no worker of it comes
    back to route the report again, so only what was loaded can."""
    write_config({"hibernateAfterSeconds": 0.3})
    daemon = daemon_factory().start()

    async def story():
        kid = await keep_a_report(daemon, tmp_path)
        worker = proctools.proc(daemon.job(kid)["workerPid"])
        assert worker is not None
        # Its worker gone (not only dropped from the record): none can say its handback
        # again to the daemon that comes after.
        await in_thread(wait_until, lambda: not daemon.job(kid)["live"] and not proctools.alive(worker), what="the kid hibernated")
        assert await in_thread(daemon.terminate) == 0
        await in_thread(daemon.restart)
        row = daemon.job(kid)
        assert row["undeliveredReport"] is True and not row["live"]
        await parent_back_gets_the_report(daemon, tmp_path, kid)

    run_async(story)


def test_foreground_parent_moved_to_the_background_still_gets_reports(daemon, tmp_path):
    gate = tmp_path / "gate"
    lead_file = tmp_path / "lead.jsonl"

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "work", "kid", scenario={"run": [{"steps": [{"wait_for": str(gate)}, {"say": "kid done"}]}]})
        # The lead's session continues as a job (the spec's "←").
        job = daemon.call("start", task="carry on", host="scripted", session=str(lead_file), cwd=str(tmp_path), scenario=QUIET, name="lead")["id"]
        await in_thread(daemon.wait_job, job)
        gate.write_text("go")
        await in_thread(wait_until, lambda: len(reports(daemon.entries(job))) == 1, what="report in the job")
        assert reports(daemon.entries(job))[0]["body"].endswith("kid done")
        assert daemon.job(kid)["parent"] == job

    run_async(story)


# ---------------------------------------------------------------------------- synthetic ended


def ended_reports(lead) -> list[str]:
    """The reports the daemon made for a stop, a removal or a crash (each says ``next:``)."""
    return [e["content"] for e in lead.delivered if e["kind"] == "report" and "\nnext: " in e["content"]]


def test_stopped_removed_and_crashed_children_each_send_one_ended_report(daemon, tmp_path):
    hold = {"run": [{"steps": [{"wait_for": str(tmp_path / "never")}]}]}

    async def story():
        async with session(daemon, tmp_path) as lead:
            stopped = await spawn(lead, "a", "stopped-kid", scenario=hold)
            removed = await spawn(lead, "b", "removed-kid", scenario=hold)
            crashed = await spawn(lead, "c", "crashed-kid", scenario=hold)
            for kid in (stopped, removed, crashed):
                await in_thread(wait_until, lambda kid=kid: daemon.job(kid)["connected"] and daemon.job(kid)["pending"] == 0, what="running")
            daemon.call("stop", job=stopped)
            daemon.call("stop", job=stopped)  # a second stop sends nothing more
            daemon.call("remove", job=removed)
            os.kill(daemon.record(crashed)["worker_pid"], signal.SIGKILL)
            await in_thread(wait_until, lambda: len(ended_reports(lead)) == 3, what="three ended reports")
            texts = ended_reports(lead)
            assert any("state: ended (stopped by the user)" in t and 'from="stopped-kid"' in t for t in texts)
            assert any("state: ended (removed by the user)" in t and 'from="removed-kid"' in t for t in texts)
            assert any("state: failed (its worker crashed" in t and 'from="crashed-kid"' in t for t in texts)
            await in_thread(daemon.wait_job, crashed, "failed")
            assert len(ended_reports(lead)) == 3

    run_async(story)


def report_bodies(lead, kid_name: str) -> list[str]:
    bodies = []
    for event in report_events(lead):
        (envelope,) = parse_envelopes(event["content"])
        if envelope["from"] == kid_name:
            bodies.append(envelope["body"])
    return bodies


def test_a_crashed_childs_report_says_a_message_starts_it_again_and_it_does(daemon, tmp_path):
    """Issue 39 point 7: one crash during a run leaves the child ``failed``, and a message
    starts it again. Its report must say so (the old one said "given up ... will not report
    again", and a model believing it spawns a second child), and what it said comes true."""
    gate = tmp_path / "gate"
    scenario = {"run": [{"steps": [{"wait_for": str(gate)}, {"say": "never said"}]}], "default": {"steps": [{"say": "back: {input}"}]}}

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "work", "kid", scenario=scenario)
            await in_thread(wait_until, lambda: daemon.job(kid)["connected"] and daemon.job(kid)["pending"] == 0, what="kid running")
            ok, text, data = await lead.call_tool("roost_agents", {"watch": kid})
            assert ok, text
            os.kill(daemon.record(kid)["worker_pid"], signal.SIGKILL)
            await in_thread(wait_until, lambda: len(report_bodies(lead, "kid")) == 1, what="the crash report")
            notices = await in_thread(wait_until, lambda: [e["content"] for e in lead.delivered if e["kind"] == "notice"], what="the watch's notice")
            assert f"kid ({kid}) crashed: state failed" in notices[0], notices
            (crash,) = report_bodies(lead, "kid")
            assert crash.startswith("state: failed (its worker crashed during a run)\nerror: worker died during a run (killed by SIGKILL)"), crash
            assert "next: not running now; a message to it starts it again, and it reports again as usual" in crash
            assert "given up" not in crash and "will not report again" not in crash
            row = daemon.job(kid)
            assert row["state"] == "failed" and not row["live"]
            # As the report said: the parent's message starts it again, and it reports.
            ok, text, data = await send(lead, kid, "carry on")
            assert ok and data["result"] == "started", text
            await in_thread(wait_until, lambda: len(report_bodies(lead, "kid")) == 2, what="the report after the restart")
            assert report_bodies(lead, "kid")[1] == "state: done\n\nback: carry on"

    run_async(story)


def test_a_failed_runs_report_says_what_follows_and_it_does(daemon, tmp_path):
    """Issue 54 point 2: a child whose run fails (its host says so: here the scripted
    model's error; for pi, pi exited during the run) stays a job a message starts again.
    Its report says so with a ``next:`` line, as a crash's report does, and it comes true."""
    scenario = {"run": [{"steps": [{"fail": "the model refused"}]}], "default": {"steps": [{"say": "back: {input}"}]}}

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "work", "kid", scenario=scenario)
            await in_thread(wait_until, lambda: len(report_bodies(lead, "kid")) == 1, what="the failed run's report")
            (failed,) = report_bodies(lead, "kid")
            assert failed == (
                "state: failed\nerror: the model refused\n"
                "next: its run failed, the job stays; a message to it starts it again on the same session, and it reports again as usual"
            ), failed
            assert daemon.job(kid)["state"] == "failed"
            ok, text, _data = await send(lead, kid, "carry on")
            assert ok, text
            await in_thread(wait_until, lambda: len(report_bodies(lead, "kid")) == 2, what="the report of the run the message started")
            assert report_bodies(lead, "kid")[1] == "state: done\n\nback: carry on"

    run_async(story)


def test_a_child_given_up_after_crashes_says_how_often_and_that_a_message_restarts_it(daemon_factory, tmp_path):
    """A child whose worker crashes each time it starts, with its task waiting: roost gives
    up after 4 crashes. The report says that (and the count), and that a message starts it
    again, which it does: the next give-up reports again, as said."""
    broken = tmp_path / "pi"
    broken.write_text("#!/bin/sh\necho 'this pi cannot start' >&2\nexit 1\n")
    broken.chmod(0o755)
    daemon = daemon_factory(ROOST_PI_BIN=str(broken)).start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "work", "kid", host="pi")
            await in_thread(wait_until, lambda: len(report_bodies(lead, "kid")) == 1, what="the give-up report")
            (report,) = report_bodies(lead, "kid")
            assert report.startswith("state: failed (its worker crashed 4 times in a row while work waited for it; roost stopped restarting it)\nerror: worker crashed 4 times; giving up"), report
            assert "next: not running now; a message to it starts it again" in report
            assert daemon.job(kid)["state"] == "failed"
            ok, text, data = await send(lead, kid, "try again")
            assert ok and data["result"] == "started", text
            await in_thread(wait_until, lambda: len(report_bodies(lead, "kid")) == 2, what="the second give-up report")
            assert report_bodies(lead, "kid")[1] == report

    run_async(story)


def test_roost_agents_shows_the_tree(daemon, tmp_path):
    import json
    import subprocess
    import sys

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "work", "kid", scenario=QUIET)
            await in_thread(daemon.wait_job, kid)

            def cli(*args):
                return subprocess.run([sys.executable, "-m", "roost_core.cli", "agents", *args], env=daemon.env, capture_output=True, text=True, timeout=30)

            by_dir = cli().stdout
            lines = by_dir.splitlines()
            lead_line = next(i for i, line in enumerate(lines) if "lead (" in line)
            assert "↳ ● kid" in lines[lead_line + 1] or "↳ ○ kid" in lines[lead_line + 1]
            by_state = cli("--group", "state").stdout
            assert any("kid (" in line and "↳ lead" in line for line in by_state.splitlines())
            rows = json.loads(cli("--json").stdout)
            kid_row = next(r for r in rows if r["id"] == kid)
            assert kid_row["parent"] == lead.peer_id and kid_row["rootSession"] == lead.session

    run_async(story)


def test_parent_messages_get_reports_three_runs_in_a_row_and_no_more(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "start", "kid", scenario={"default": {"steps": [{"say": "answer to {input}"}]}})
            await in_thread(wait_until, lambda: len(report_events(lead)) == 1, what="the task's report")
            for n in range(4):
                await send(lead, kid, f"question {n}")
                await in_thread(wait_until, lambda n=n: f"question {n}" in " ".join(daemon_texts(daemon, kid)) and quiet(daemon, kid), what=f"run {n}")
            bodies = [e["content"] for e in report_events(lead)]
            # The task's report, then one for each of the first three parent messages.
            assert len(bodies) == 4
            assert all(f"answer to question {n}" in bodies[n + 1] for n in range(3))
            assert not any("question 3" in body for body in bodies)
            # A user reply resets it: the next run reports again.
            daemon.call("reply", job=kid, text="from the user")
            await in_thread(wait_until, lambda: len(report_events(lead)) == 5, what="the reply's report")

    run_async(story)


def report_events(lead) -> list[dict]:
    return [e for e in lead.delivered if e["kind"] == "report"]


def daemon_texts(daemon, job) -> list[str]:
    from roost_core.transcript import content_text

    return [content_text(e["message"]["content"]) for e in daemon.entries(job) if e.get("type") == "message"]


def test_no_report_while_blocked_on_a_dialog(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "deploy", "kid", scenario={"run": [{"steps": [{"dialog": "Deploy?"}, {"say": "deployed"}]}]})
            await in_thread(wait_until, lambda: daemon.job(kid)["dialog"], what="dialog open")
            assert report_events(lead) == []
            daemon.call("reply", job=kid, text="yes")
            await in_thread(wait_until, lambda: len(report_events(lead)) == 1, what="the report after the dialog")
            assert "deployed" in report_events(lead)[0]["content"]

    run_async(story)


def test_report_result_is_cut_to_6000_chars_and_children_inherit_the_model(daemon, tmp_path):
    long_text = "x" * 7000

    async def story():
        async with session(daemon, tmp_path) as lead:
            parent = daemon.start_job("p", name="p", model="big", thinking="high", scenario={
                "run": [{"steps": [{"spawn": {"task": "write a lot", "name": "kid"}}, {"say": "spawned"}]}],
                "default": {"steps": [{"say": "noted"}]},
            })
            await in_thread(wait_until, lambda: len(reports(daemon.entries(parent))) == 1, what="report")
            kid = next(r for r in daemon.call("jobs")["jobs"] if r["name"] == "kid")
            record = daemon.record(kid["id"])
            assert (record["model"], record["thinking"]) == ("big", "high")
            wordy = await spawn(lead, "wordy", "wordy", scenario={"default": {"steps": [{"say": long_text}]}})
            await in_thread(wait_until, lambda: report_events(lead), what="the wordy report")
            (event,) = report_events(lead)
            assert event["from"] == wordy
            assert "x" * 6000 in event["content"] and "x" * 6001 not in event["content"]

    run_async(story)


@pytest.mark.parametrize("blocked", ["reach", "limits", "envelope", "render", "tools", "handback", "settle"])
def test_the_core_still_runs_with_any_default_plugin_blocked(daemon_factory, tmp_path, blocked):
    import subprocess
    import sys

    from conftest import BLOCKED_BY_DEFAULT

    daemon = daemon_factory(ROOST_DISABLE_PLUGINS=f"{blocked},{BLOCKED_BY_DEFAULT}").start()
    job = daemon.start_job("still works", scenario=QUIET)
    assert daemon.wait_job(job)["state"] == "done"
    out = subprocess.run([sys.executable, "-m", "roost_core.cli", "log", job], env=daemon.env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "still works" in out.stdout
