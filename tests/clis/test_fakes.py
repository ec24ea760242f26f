"""The agent-CLI fakes as a real model would be (no CLI needed): a scripted tool call goes
out only when the request lists that tool, in each API's own shape; otherwise the fake
refuses with an API error and keeps the violation."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from fake_chat import FakeChat
from fake_gemini import FakeGemini
from fake_responses import FakeResponses

pytestmark = pytest.mark.smoke  # no CLI: the fast tier runs it

PING = {"run": [{"steps": [{"tool": "ping", "args": {"message": "hi"}}, {"say": "pinged"}]}]}


def post(url: str, body: dict) -> tuple[int, str]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def sse_data(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def responses_body(tools: list[dict]) -> dict:
    return {"model": "fake-model", "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}], "tools": tools}


def test_responses_fake_calls_an_mcp_tool_in_its_namespace_only_when_listed(tmp_path):
    with FakeResponses(PING, tmp_path / "log.jsonl") as fake:
        namespace = {"type": "namespace", "name": "mcp__srv", "tools": [{"type": "function", "name": "ping"}]}
        status, text = post(f"{fake.base_url}/responses", responses_body([namespace]))
        assert status == 200
        [done] = [e for e in sse_data(text) if e["type"] == "response.output_item.done"]
        assert done["item"]["name"] == "ping" and done["item"]["namespace"] == "mcp__srv"
        assert json.loads(done["item"]["arguments"]) == {"message": "hi"}
        status, text = post(f"{fake.base_url}/responses", responses_body([{"type": "function", "name": "exec_command"}]))
        assert status == 400 and "does not list" in text
        assert len(fake.violations) == 1


def test_gemini_fake_calls_mcp_server_tool_only_when_listed(tmp_path):
    with FakeGemini(PING, tmp_path / "log.jsonl") as fake:
        url = f"{fake.origin}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}],
                "tools": [{"functionDeclarations": [{"name": "mcp_srv_ping"}]}]}
        status, text = post(url, body)
        assert status == 200
        [chunk] = sse_data(text)
        assert chunk["candidates"][0]["content"]["parts"][0]["functionCall"]["name"] == "mcp_srv_ping"
        status, text = post(url, {**body, "tools": [{"functionDeclarations": [{"name": "read_file"}]}]})
        assert status == 400 and "does not list" in text
        assert len(fake.violations) == 1


@pytest.mark.parametrize("dialect", ["opencode", "qwen"])
def test_chat_fake_calls_mcp_tool_in_each_dialect_only_when_listed(tmp_path, dialect):
    with FakeChat(PING, tmp_path / "log.jsonl", dialect=dialect, servers=("srv",)) as fake:
        url = f"{fake.base_url}/chat/completions"
        if dialect == "opencode":
            listed = {"messages": [{"role": "user", "content": "go"}], "tools": [{"type": "function", "function": {"name": "srv_ping"}}]}
            expected = ("srv_ping", {"message": "hi"})
        else:  # deferred: named in a reminder, called through the bridge tool
            listed = {"messages": [{"role": "user", "content": "<system-reminder>mcp__srv__ping</system-reminder>go"}],
                      "tools": [{"type": "function", "function": {"name": "tool_call"}}]}
            expected = ("tool_call", {"name": "mcp__srv__ping", "arguments": {"message": "hi"}})
        status, text = post(url, {"model": "fake-model", **listed})
        assert status == 200
        calls = [c for chunk in sse_data(text) for choice in chunk["choices"] for c in choice["delta"].get("tool_calls", [])]
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [expected]
        unlisted = {"model": "fake-model", "messages": [{"role": "user", "content": "go"}], "tools": [{"type": "function", "function": {"name": "glob"}}]}
        status, text = post(url, unlisted)
        assert status == 400 and "does not list" in text
        assert len(fake.violations) == 1
