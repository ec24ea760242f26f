"""The fake model servers the pi and Claude tests run against are as strict as a real
model: a tool the request does not list is never called, and an agent item whose frame
does not parse is refused, not read as a plain user reply."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.extend([str(TESTS / "pi"), str(TESTS / "claude")])  # after the tests' own conftest

from fake_anthropic import scenario_tools, to_chat  # noqa: E402
from fake_openai import ModelRefusal, answer  # noqa: E402

from roost_plugins.envelope import frame  # noqa: E402

SCENARIO = {"run": [{"steps": [{"agents": {}}, {"say": "looked"}]}], "default": {"steps": [{"say": "ok: {input}"}]}}


def tools(*names: str) -> list[dict]:
    return [{"type": "function", "function": {"name": name}} for name in names]


def test_a_tool_the_request_does_not_list_is_refused_naming_it():
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
    assert answer(SCENARIO, {**body, "tools": tools("bash", "roost_agents")})["tool"][0] == "roost_agents"
    with pytest.raises(ModelRefusal, match="'roost_agents', which the request does not list"):
        answer(SCENARIO, {**body, "tools": tools("bash")})


def test_claude_codes_tool_names_are_the_scenarios():
    body = {"tools": [{"name": "Bash"}, {"name": "mcp__roost__roost_agents"}, {"name": "WaitForMcpServers"}]}
    assert scenario_tools(body) == {"bash", "roost_agents", "WaitForMcpServers"}


def test_a_frame_that_does_not_parse_is_refused_not_read_as_a_reply():
    good = frame("kid", "k1", "child", "report", "done", "m1")
    body = {"model": "m", "messages": [{"role": "user", "content": good}], "tools": []}
    replies = {"default": {"steps": [{"say": "ok: {input}"}]}}
    assert answer(replies, body) == {"text": "ok: done"}
    for broken in (good.replace("</agent-message>", ""), good.replace(' kind="report"', ""), good + '\n<agent-message from="x">'):
        with pytest.raises(ModelRefusal, match="unparseable agent-message frame"):
            answer(replies, {**body, "messages": [{"role": "user", "content": broken}]})
        # The same in Claude Code's wire format (a hook's context).
        system = {"role": "system", "content": "PostToolUse:Bash hook additional context: " + broken}
        with pytest.raises(ModelRefusal):
            to_chat([{"role": "user", "content": "go"}, system])
