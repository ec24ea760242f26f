"""Settle classification through real processes: a child whose final text asks its
parent something settles ``needs_input``, and the question is in the parent's report,
``roost jobs``, ``roost_agents`` and ``roost agents``; with the settle plugin blocked the
host's own state stands."""

from __future__ import annotations

import subprocess
import sys

from conftest import BLOCKED_BY_DEFAULT
from fg import in_thread, run_async, session, spawn

from roost_plugins.envelope import parse_envelopes

QUESTION = "Which database should the cache use?\n\n- redis\n- postgres"
ASKER = {"default": {"steps": [{"say": "I read the cache code."}, {"say": QUESTION}]}}


def roost(daemon, *args: str, module: str = "roost_core.cli") -> str:
    out = subprocess.run([sys.executable, "-m", module, *args], env=daemon.env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_child_that_ends_asking_reports_needs_input_with_its_question(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "look at the cache", "kid", scenario=ASKER)
            await lead.wait_for_delivery(1)
            (report,) = lead.delivered
            assert report["kind"] == "report"
            body = parse_envelopes(report["content"])[0]["body"]
            assert body == f"state: needs_input\nquestion: {QUESTION}", body
            row = await in_thread(daemon.wait_job, kid, "needs_input")
            assert row["question"] == QUESTION
            _ok, text, data = await lead.call_tool("roost_agents", {})
            (listed,) = [peer for peer in data["peers"] if peer["id"] == kid]
            assert listed["state"] == "needs_input" and listed["question"] == QUESTION
            assert "    question: Which database should the cache use?" in text
            return kid

    kid = run_async(story)
    jobs = roost(daemon, "jobs")
    (line,) = [line for line in jobs.splitlines() if line.startswith(kid)]
    assert "needs_input" in line and line.endswith("Which database should the cache use? - redis - postgres")
    agents = roost(daemon, "agents")
    assert any(kid in line and "needs_input" in line and "Which database" in line for line in agents.splitlines()), agents
    # ``roost view`` (its plain form, as in a pipe) shows the question the same way.
    view = roost(daemon, module="roost_core.view")
    (line,) = [line for line in view.splitlines() if f"kid ({kid})" in line]
    assert "needs_input" in line and line.endswith("— Which database should the cache use? - redis - postgres"), line


def test_with_the_settle_plugin_blocked_the_hosts_state_stands(daemon_factory, tmp_path):
    daemon = daemon_factory(ROOST_DISABLE_PLUGINS=f"settle,{BLOCKED_BY_DEFAULT}").start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "look at the cache", "kid", scenario=ASKER)
            await lead.wait_for_delivery(1)
            body = parse_envelopes(lead.delivered[0]["content"])[0]["body"]
            assert body.startswith("state: done\n"), body
            row = await in_thread(daemon.wait_job, kid)
            assert row["state"] == "done" and row["question"] is None

    run_async(story)


def test_the_scripted_hosts_own_question_still_wins(daemon, tmp_path):
    # ``ask`` says needs_input itself; its question need not end with "?".
    job = daemon.start_job("pick", scenario={"default": {"steps": [{"ask": "Pick a branch: main or dev."}]}})
    row = daemon.wait_job(job, "needs_input")
    assert row["question"] == "Pick a branch: main or dev."


def test_a_plugin_blocked_in_the_config_reaches_forked_workers_at_the_next_daemon_start(daemon, write_config, tmp_path):
    # The fork server prepared its workers' plugins with settle; the user blocks it now.
    # A worker runs the daemon's plugin set (its hello says the config), so the change
    # waits for the next daemon start (roost daemon status says so), then holds there.
    first = daemon.start_job("ask", scenario=ASKER)
    assert daemon.wait_job(first)["state"] == "needs_input"
    write_config({"plugins": {"disable": ["settle"]}})
    second = daemon.start_job("ask again", scenario=ASKER)
    assert daemon.wait_job(second)["state"] == "needs_input"
    assert daemon.terminate() == 0
    daemon.restart()
    third = daemon.start_job("ask once more", scenario=ASKER)
    row = daemon.wait_job(third)
    assert row["state"] == "done" and row["question"] is None
