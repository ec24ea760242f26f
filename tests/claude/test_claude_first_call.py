"""After ``roost claude install``, roost's tools are in Claude Code's first model call,
every time: in one-shot ``claude -p`` runs and in stream-json sessions. The fake model is
strict (it calls a tool only when the request lists it), so a run whose first call lacks
the tools fails instead of passing by luck."""

from __future__ import annotations

import json
import os
import subprocess

from pikit import roost_bin
from test_claude_foreground import StreamClaude

from conftest import wait_until

RUNS = int(os.environ.get("ROOST_FIRST_CALL_RUNS", "8"))
SCENARIO = {
    "run": [{"match": "^who is there", "steps": [{"agents": {}}, {"say": "looked: {input}"}]}],
    "default": {"steps": [{"say": "ok: {input}"}]},
}


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
    for number in range(RUNS):
        result = subprocess.run(
            [claude_kit.claude, "-p", f"who is there {number}", "--output-format", "json"],
            env={**claude_kit.env, "ROOST_NAME": f"one-shot-{number}"}, cwd=project, capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, (number, result.stdout[-2000:], result.stderr[-2000:])
        assert json.loads(result.stdout)["result"] == f"looked: who is there {number}", result.stdout
    firsts = first_calls(fake)
    assert len(firsts) == RUNS
    with_tools = [r for r in firsts if "mcp__roost__roost_agents" in r["tools"]]
    assert len(with_tools) == RUNS, f"roost's tools in {len(with_tools)} of {RUNS} first calls"


def test_stream_json_sessions_list_roosts_tools_in_their_first_call(claude_kit, tmp_path):
    fake = claude_kit.fake(SCENARIO)
    claude_kit.daemon()
    install(claude_kit)
    for number in range(RUNS):
        claude = StreamClaude(claude_kit.claude, {**claude_kit.env, "ROOST_NAME": f"stream-{number}"}, tmp_path / "project")
        try:
            claude.prompt(f"who is there {number}")
            wait_until(lambda: claude.results(), 120, what=f"run {number}'s result")
            assert claude.results()[0]["result"] == f"looked: who is there {number}", claude.results()
        finally:
            claude.close()
    firsts = first_calls(fake)
    with_tools = [r for r in firsts if "mcp__roost__roost_agents" in r["tools"]]
    assert len(with_tools) == RUNS, f"roost's tools in {len(with_tools)} of {RUNS} first calls"
