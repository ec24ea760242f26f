"""The pinned Codex CLI against the fake Responses API: what roost's Codex host relies on
(docs/hosts.md, "Other agent CLIs"): a headless prompt, an MCP tool listed and called,
resume by thread id, hooks pushing text mid-turn and at turn end, usage and rollouts."""

from __future__ import annotations

import json

from clifake import PING
from codexkit import agent_texts, events_of, thread_id


def test_headless_prompt_is_answered_with_usage_and_a_rollout(codex):
    fake = codex.start_fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    codex.configure()
    events = events_of(codex.exec("hello there"))
    assert agent_texts(events) == ["ok: hello there"]
    usage = next(e["usage"] for e in events if e["type"] == "turn.completed")
    assert usage["input_tokens"] == 100 and usage["output_tokens"] == 10  # the fake's one response
    [request] = fake.requests()
    assert request["path"] == "/v1/responses" and request["chat"] == [{"role": "user", "content": "hello there"}]
    # The session ("rollout") is JSONL under CODEX_HOME/sessions, named by the thread id,
    # with the per-response usage in token_count events.
    [rollout] = codex.rollouts()
    assert thread_id(events) in rollout.name
    records = [json.loads(line) for line in rollout.read_text().splitlines()]
    counts = [r["payload"]["info"] for r in records if r["type"] == "event_msg" and r["payload"].get("type") == "token_count" and r["payload"].get("info")]
    assert counts[-1]["last_token_usage"]["input_tokens"] == 100
    assert not fake.violations


def test_mcp_tool_is_listed_called_and_its_result_reaches_the_next_request(codex):
    fake = codex.start_fake(PING)
    codex.configure(mcp=True)
    events = events_of(codex.exec("please ping"))
    assert agent_texts(events) == ["pinged"]
    assert codex.pings() == ["hello"]
    first, second = fake.requests()
    namespaces = {t["name"]: [i["name"] for i in t["tools"]] for t in first["body"]["tools"] if t.get("type") == "namespace"}
    assert namespaces["mcp__pingsrv"] == ["ping"]  # an MCP server is one namespace tool
    call = next(i for i in second["body"]["input"] if i.get("type") == "function_call")
    assert (call["name"], call["namespace"]) == ("ping", "mcp__pingsrv")
    output = next(i for i in second["body"]["input"] if i.get("type") == "function_call_output")
    assert "pong: hello" in output["output"]
    assert [e["item"]["tool"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "mcp_tool_call"] == ["ping"]
    assert not fake.violations


def test_resume_by_thread_id_carries_the_history(codex):
    fake = codex.start_fake(PING)
    codex.configure(mcp=True)
    first = events_of(codex.exec("please ping"))
    thread = thread_id(first)
    again = events_of(codex.resume(thread, "and now?"))
    assert thread_id(again) == thread
    assert agent_texts(again) == ["ok: and now?"]
    last = fake.requests()[-1]
    assert [m["role"] for m in last["chat"]] == ["user", "assistant", "tool", "assistant", "user"]
    assert last["chat"][0]["content"] == "please ping" and last["chat"][-1]["content"] == "and now?"
    assert len(codex.rollouts()) == 1  # resume appends to the same rollout
    assert not fake.violations


def test_hooks_push_text_after_a_tool_and_at_turn_end(codex):
    fake = codex.start_fake(PING)
    codex.configure(mcp=True, hooks={"PostToolUse": "MIDTURN-NOTE", "Stop": "TURNEND-NOTE"})
    events = events_of(codex.exec("please ping", trust_hooks=True))
    # Stop blocked once: its reason is a new user input, answered in the same exec run.
    assert agent_texts(events) == ["pinged", "ok: TURNEND-NOTE"]
    _first, second, third = fake.requests()
    kinds = [(i.get("type", "message"), i.get("role")) for i in second["body"]["input"]]
    # PostToolUse's additionalContext: a developer message between the call and its output.
    at = kinds.index(("function_call", None))
    assert kinds[at + 1:at + 3] == [("message", "developer"), ("function_call_output", None)]
    assert second["body"]["input"][at + 1]["content"][0]["text"] == "MIDTURN-NOTE"
    stop_prompt = third["body"]["input"][-1]
    assert stop_prompt["role"] == "user" and "TURNEND-NOTE</hook_prompt>" in stop_prompt["content"][0]["text"]
    calls = codex.hook_calls()
    assert [c["argv_event"] for c in calls] == ["PostToolUse", "Stop", "Stop"]
    assert calls[0]["tool_name"] == "mcp__pingsrv__ping" and calls[0]["transcript_path"].endswith(".jsonl")
    assert [c["stop_hook_active"] for c in calls[1:]] == [False, True]
    assert not fake.violations


def test_hooks_do_not_run_unless_trusted(codex):
    """Codex skips hooks it has not trusted, silently: roost's Codex host must trust them."""
    fake = codex.start_fake(PING)
    codex.configure(mcp=True, hooks={"PostToolUse": "MIDTURN-NOTE", "Stop": "TURNEND-NOTE"})
    events = events_of(codex.exec("please ping"))
    assert agent_texts(events) == ["pinged"]
    assert codex.hook_calls() == []
    assert len(fake.requests()) == 2


def test_hooks_trusted_for_good_through_the_app_server_run_without_the_bypass_flag(codex):
    """How a user's own Codex can keep roost's hooks: trusted once (their hashes written
    to config.toml), every later run uses them; editing a hook would need trust again."""
    fake = codex.start_fake(PING)
    codex.configure(mcp=True, hooks={"PostToolUse": "MIDTURN-NOTE", "Stop": "TURNEND-NOTE"})
    keys = codex.trust_hooks()
    assert sorted(k.rsplit(":", 3)[1] for k in keys) == ["post_tool_use", "stop"]
    assert 'trusted_hash = "sha256:' in (codex.codex_home / "config.toml").read_text()
    events = events_of(codex.exec("please ping"))
    assert agent_texts(events) == ["pinged", "ok: TURNEND-NOTE"]
    assert [c["argv_event"] for c in codex.hook_calls()] == ["PostToolUse", "Stop", "Stop"]
    assert not [e for e in events if e.get("type") == "item.completed" and "bypass-hook-trust" in e["item"].get("message", "")]
    assert not fake.violations
