"""The fake model servers the pi and Claude tests run against are as strict as a real
model: a tool the request does not list is never called, and an agent item whose frame
does not parse is refused, not read as a plain user reply."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.extend([str(TESTS / "pi"), str(TESTS / "claude")])  # after the tests' own conftest

from fake_anthropic import FakeAnthropic, scenario_tools, to_chat  # noqa: E402
from fake_openai import FakeOpenAI, ModelRefusal, answer  # noqa: E402
from fakemodel import FakeModelServer  # noqa: E402
from hostkit import stop_fakes  # noqa: E402

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


def post(url: str, body: dict) -> tuple[int, bytes]:
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", "x-api-key": "k"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


@pytest.mark.parametrize("fake_class, path, listed", [
    (FakeOpenAI, "/chat/completions", {"tools": tools("roost_agents")}),
    (FakeAnthropic, "/v1/messages", {"tools": [{"name": "mcp__roost__roost_agents"}]}),
])
def test_both_fakes_serve_log_and_keep_refusals_on_the_shared_plumbing(tmp_path, fake_class, path, listed):
    """Both fake servers are one server (``fakemodel.FakeModelServer``) behind two wire
    formats: over real HTTP each answers a scenario, logs every request, answers a call to
    a tool the request does not list as an API error and keeps it, and the kits' shared
    cleanup (``hostkit.stop_fakes``) fails the test naming it."""
    fake = fake_class(SCENARIO, tmp_path / "log.jsonl").start()
    assert isinstance(fake, FakeModelServer)
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
    status, data = post(fake.base_url + path, {**body, **listed})
    assert status == 200 and b"roost_agents" in data
    status, data = post(fake.base_url + path, body)
    assert status == 400 and b"does not list" in data
    assert [request["tools"] for request in fake.requests()] == [[t.get("name") or t["function"]["name"] for t in listed["tools"]], []]
    with pytest.raises(AssertionError, match="refused 1 request"):
        stop_fakes([fake])
