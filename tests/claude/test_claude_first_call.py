"""roost's tools are in Claude Code's first model call, every time: in one-shot ``claude -p``
runs and stream-json sessions after ``roost claude install``, and in background jobs. The
fake model is strict (it calls a tool only when the request lists it), so a run whose first
call lacks roost's tools fails instead of passing by luck.

Claude Code does not wait for the MCP servers of ``~/.claude.json`` before its first call
unless told to, so the runs alternate a ``roost mcp`` that starts at once with one that is
slow to start (7 s, as Python and the MCP SDK are on a loaded machine: past the 5 s that
``alwaysLoad`` alone waits), through ``slowstart/sitecustomize.py``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import wait_until
from pikit import roost_bin
from test_claude_foreground import StreamClaude

SLOW_START = "7"
SCENARIO = {
    "run": [{"match": "^who is there", "steps": [{"agents": {}}, {"say": "looked: {input}"}]}],
    "default": {"steps": [{"say": "ok: {input}"}]},
}


def slow_env(env: dict[str, str], slow: bool) -> dict[str, str]:
    """``env`` with a slow-starting ``roost mcp`` (or not)."""
    folder = str(Path(__file__).resolve().parent / "slowstart")
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [folder, env.get("PYTHONPATH")])), "ROOST_TEST_MCP_START_DELAY": SLOW_START if slow else ""}


def first_calls(fake) -> list[dict]:
    """The first model call of each run (the one that answers the prompt)."""
    return [r for r in fake.requests() if len(r["messages"]) == 1]


def install(claude_kit) -> None:
    installed = subprocess.run([roost_bin(), "claude", "install"], env=claude_kit.env, capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0, installed.stderr


def test_one_shot_runs_list_roosts_tools_in_their_first_call(claude_kit, tmp_path):
    fake = claude_kit.fake(SCENARIO)
    claude_kit.daemon()
    install(claude_kit)
    project = tmp_path / "project"
    project.mkdir()
    runs = 6
    for number in range(runs):
        env = slow_env({**claude_kit.env, "ROOST_NAME": f"one-shot-{number}"}, slow=number % 2 == 1)
        result = subprocess.run([claude_kit.claude, "-p", f"who is there {number}", "--output-format", "json"], env=env, cwd=project, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (number, result.stdout[-2000:], result.stderr[-2000:])
        assert json.loads(result.stdout)["result"] == f"looked: who is there {number}", (number, fake.violations)
    firsts = first_calls(fake)
    assert len(firsts) == runs and all("mcp__roost__roost_agents" in r["tools"] for r in firsts)


def test_stream_json_sessions_list_roosts_tools_in_their_first_call(claude_kit, tmp_path):
    fake = claude_kit.fake(SCENARIO)
    claude_kit.daemon()
    install(claude_kit)
    runs = 4
    for number in range(runs):
        env = slow_env({**claude_kit.env, "ROOST_NAME": f"stream-{number}"}, slow=number % 2 == 1)
        claude = StreamClaude(claude_kit.claude, env, tmp_path / "project")
        try:
            claude.prompt(f"who is there {number}")
            wait_until(lambda: claude.results(), 120, what=f"run {number}'s result")  # noqa: B023 - waited for here, in this pass
            assert claude.results()[0]["result"] == f"looked: who is there {number}", (number, fake.violations)
        finally:
            claude.close()
    firsts = first_calls(fake)
    assert len(firsts) == runs and all("mcp__roost__roost_agents" in r["tools"] for r in firsts)


def test_a_jobs_first_call_lists_roosts_tools_when_its_server_is_slow(claude_kit, daemon_factory):
    # A job gives roost's server with --mcp-config, which Claude Code waits for.
    fake = claude_kit.fake(SCENARIO)
    slow = slow_env(claude_kit.env, slow=True)
    daemon = daemon_factory(PYTHONPATH=slow["PYTHONPATH"], ROOST_TEST_MCP_START_DELAY=SLOW_START).start()
    job = daemon.start_job("who is there, job", host="claude", name="job")
    row = daemon.wait_job(job, timeout=120)
    assert row["state"] == "done" and row["summary"] == "looked: who is there, job", (row, fake.violations)
    (first,) = first_calls(fake)
    assert "mcp__roost__roost_agents" in first["tools"]


def test_a_jobs_and_its_childs_first_calls_list_roosts_tools_with_tool_search_at_its_default(claude_kit):
    # Claude Code's default defers MCP tools behind its tool search (only their names in
    # the request's text); a job's roost server is loaded at once, as the installed one is.
    del claude_kit.env["ENABLE_TOOL_SEARCH"]
    scenario = {
        "run": [
            {"match": "^hand off", "steps": [{"spawn": {"task": "who is there, child", "name": "child"}}, {"say": "handed off"}]},
            {"match": "^who is there", "steps": [{"agents": {}}, {"say": "looked: {input}"}]},
        ],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = claude_kit.fake(scenario)
    daemon = claude_kit.daemon()
    job = daemon.start_job("hand off", host="claude", name="parent")
    child = wait_until(lambda: next((row["id"] for row in daemon.call("jobs")["jobs"] if row["id"] != job), None), 120, what="the child")
    child_row = daemon.wait_job(child, timeout=120)
    assert child_row["state"] == "done" and child_row["summary"] == "looked: who is there, child", (child_row, fake.violations)
    daemon.wait_job(job, timeout=120)  # the parent takes the child's report
    firsts = [first for first in first_calls(fake) if "hand off" in json.dumps(first["raw"]) or "who is there" in json.dumps(first["raw"])]
    # (A job has no roost_inbox: its worker hands items over through the hooks.)
    roost_tools = {f"mcp__roost__roost_{tool}" for tool in ("agents", "send", "spawn")}
    assert len(firsts) == 2 and all(roost_tools <= set(first["tools"]) for first in firsts), [sorted(first["tools"]) for first in firsts]
