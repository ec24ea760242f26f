"""The pinned Gemini CLI against the fake Gemini API: what roost's Gemini host relies on
(docs/hosts.md, "Other agent CLIs"): a headless prompt, an MCP tool listed and called,
resume by session id, hooks pushing text mid-turn and at turn end, usage and sessions."""

from __future__ import annotations

import json

from clifake import PING, scripted
from geminikit import assistant_texts, events_of, session_id


def test_headless_prompt_is_answered_with_usage_and_a_session_file(gemini):
    fake = gemini.start_fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    gemini.configure()
    events = events_of(gemini.prompt("hello there"))
    assert assistant_texts(events) == ["ok: hello there"]
    result = next(e for e in events if e["type"] == "result")
    assert result["status"] == "success" and result["stats"]["input_tokens"] == 100 and result["stats"]["output_tokens"] == 10
    answered = scripted(fake)
    assert [r["chat"] for r in answered] == [[{"role": "user", "content": "hello there"}]]
    assert ":streamGenerateContent" in answered[0]["path"]
    # The session: JSONL under ~/.gemini/tmp/<project>/chats/, named by the id's first 8
    # characters; a header line, then messages ("gemini" ones with their tokens) and
    # {"$set": ...} patches.
    [chat] = gemini.chats()
    sid = session_id(events)
    assert chat.name.endswith(f"-{sid[:8]}.jsonl")
    records = [json.loads(line) for line in chat.read_text().splitlines()]
    assert records[0]["sessionId"] == sid
    answers = [r for r in records if r.get("type") == "gemini"]
    assert answers and answers[-1]["content"] == "ok: hello there" and answers[-1]["tokens"]["input"] == 100
    assert not fake.violations


def test_mcp_tool_is_listed_called_and_its_result_reaches_the_next_request(gemini):
    fake = gemini.start_fake(PING)
    gemini.configure(mcp=True)
    events = events_of(gemini.prompt("please ping"))
    assert assistant_texts(events) == ["pinged"]
    assert gemini.pings() == ["hello"]
    first, second = scripted(fake)
    names = [d["name"] for group in first["body"]["tools"] for d in group.get("functionDeclarations", [])]
    assert "mcp_pingsrv_ping" in names  # MCP tools are mcp_<server>_<tool>
    [use] = [e for e in events if e["type"] == "tool_use"]
    assert use["tool_name"] == "mcp_pingsrv_ping" and use["parameters"] == {"message": "hello"}
    response = second["body"]["contents"][-1]["parts"][0]["functionResponse"]
    assert "pong: hello" in response["response"]["output"]
    assert not fake.violations


def test_resume_by_session_id_carries_the_history(gemini):
    fake = gemini.start_fake(PING)
    gemini.configure(mcp=True)
    first = events_of(gemini.prompt("please ping"))
    sid = session_id(first)
    again = events_of(gemini.prompt("and now?", resume=sid))
    assert session_id(again) == sid
    assert assistant_texts(again) == ["ok: and now?"]
    last = scripted(fake)[-1]
    chat = last["chat"]
    assert chat[0] == {"role": "user", "content": "please ping"} and chat[-1] == {"role": "user", "content": "and now?"}
    assert any(m["role"] == "tool" and "pong: hello" in m["content"] for m in chat)
    assert {"role": "assistant", "content": "pinged"} in chat
    # Every session file written is this session's: a file is named after the minute it was
    # started and the id's first eight characters, so a resume that runs in a later minute
    # than the first run starts a second file of the same session (docs/hosts.md).
    files = gemini.chats()
    assert files and all(path.name.endswith(f"-{sid[:8]}.jsonl") for path in files), files
    assert {json.loads(path.read_text().splitlines()[0])["sessionId"] for path in files} == {sid}
    assert not fake.violations


def test_hooks_push_text_after_a_tool_and_at_turn_end(gemini):
    fake = gemini.start_fake(PING)
    gemini.configure(mcp=True, hooks={"AfterTool": "MIDTURN-NOTE", "AfterAgent": "TURNEND-NOTE"})
    events = events_of(gemini.prompt("please ping"))
    # AfterAgent denied once: its reason is a new user prompt, answered in the same -p run.
    assert assistant_texts(events) == ["pinged", "ok: TURNEND-NOTE"]
    _first, second, third = scripted(fake)
    # AfterTool's additionalContext rides in the tool's result, as <hook_context>.
    output = second["body"]["contents"][-1]["parts"][0]["functionResponse"]["response"]["output"]
    assert "pong: hello" in output and "<hook_context>MIDTURN-NOTE</hook_context>" in output
    assert third["body"]["contents"][-1] == {"role": "user", "parts": [{"text": "TURNEND-NOTE"}]}
    calls = gemini.hook_calls()
    assert [c["argv_event"] for c in calls] == ["AfterTool", "AfterAgent", "AfterAgent"]
    assert calls[0]["tool_name"] == "mcp_pingsrv_ping" and calls[0]["transcript_path"] == str(gemini.chats()[0])
    assert [c["stop_hook_active"] for c in calls[1:]] == [False, True]
    assert not fake.violations
