"""The pinned OpenCode against the fake chat-completions API: what roost's OpenCode host
relies on (docs/hosts.md, "Other agent CLIs"): a headless prompt, an MCP tool listed and
called, resume by session id, a plugin pushing text mid-turn and at turn end, usage and
the session store."""

from __future__ import annotations

from clifake import PING, scripted, users
from conftest import wait_until
from opencodekit import events_of, post, session_id, texts


def test_headless_prompt_is_answered_with_usage_and_a_session_row(opencode):
    fake = opencode.start_fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    opencode.configure()
    events = events_of(opencode.prompt("hello there"))
    assert texts(events) == ["ok: hello there"]
    finish = [e for e in events if e["type"] == "step_finish"]
    assert finish[-1]["part"]["tokens"]["input"] == 10 and finish[-1]["part"]["tokens"]["output"] == 5
    [request] = scripted(fake)
    assert users(request) == ["hello there"] and request["body"]["stream"] is True
    # A new session first asks small_model for a title (no tools).
    [title] = [r for r in fake.requests() if r["reply"].get("side")]
    assert title["body"]["model"] == "fake-title" and not title["body"].get("tools")
    # Sessions, messages and parts live in SQLite; the session row adds up the usage.
    with opencode.db() as db:
        [(tokens_in, tokens_out)] = db.execute("select tokens_input, tokens_output from session where id = ?", (session_id(events),)).fetchall()
    assert (tokens_in, tokens_out) == (10, 5)
    # The seeded config folder kept OpenCode from npm-installing its plugin package.
    assert list((opencode.config_dir / "node_modules").iterdir()) == []
    assert not fake.violations


def test_mcp_tool_is_listed_called_and_its_result_reaches_the_next_request(opencode):
    fake = opencode.start_fake(PING)
    opencode.configure(mcp=True)
    events = events_of(opencode.prompt("please ping"))
    assert texts(events) == ["pinged"]
    assert opencode.pings() == ["hello"]
    first, second = scripted(fake)
    assert "pingsrv_ping" in [t["function"]["name"] for t in first["body"]["tools"]]  # <server>_<tool>
    [use] = [e for e in events if e["type"] == "tool_use"]
    assert use["part"]["tool"] == "pingsrv_ping" and use["part"]["state"]["output"] == "pong: hello"
    assert second["chat"][-1]["role"] == "tool" and second["chat"][-1]["content"] == "pong: hello"
    assert not fake.violations


def test_resume_by_session_id_carries_the_history(opencode):
    fake = opencode.start_fake(PING)
    opencode.configure(mcp=True)
    first = events_of(opencode.prompt("please ping"))
    sid = session_id(first)
    again = events_of(opencode.prompt("and now?", session=sid))
    assert session_id(again) == sid
    assert texts(again) == ["ok: and now?"]
    last = scripted(fake)[-1]
    assert [m["role"] for m in last["chat"] if m["role"] != "system"] == ["user", "assistant", "tool", "assistant", "user"]
    assert users(last) == ["please ping", "and now?"]
    assert len([r for r in fake.requests() if r["reply"].get("side")]) == 1  # no new title
    assert not fake.violations


def test_plugin_pushes_text_mid_turn_and_at_turn_end(opencode):
    fake = opencode.start_fake(PING)
    opencode.configure(mcp=True, plugin={"ROOST_TEST_AFTER_TOOL": "MIDTURN-NOTE", "ROOST_TEST_TRANSFORM": "EVERY-CALL-NOTE",
                                         "ROOST_TEST_ON_IDLE": "TURNEND-NOTE"})
    events = events_of(opencode.prompt("please ping"))
    assert texts(events) == ["pinged"]
    first, second = scripted(fake)
    # experimental.chat.messages.transform: a part added to the user message before every
    # call; the chat request joins a message's text parts with nothing between them.
    assert users(first) == ["please pingEVERY-CALL-NOTE"]
    # tool.execute.after: a text part added to the MCP result, in the same turn.
    assert second["chat"][-1] == {"role": "tool", "tool_call_id": second["chat"][-2]["tool_calls"][0]["id"], "content": "pong: hello\n\nMIDTURN-NOTE"}
    calls = opencode.plugin_calls()
    after = [c for c in calls if c["hook"] == "tool.execute.after"]
    assert [c["tool"] for c in after] == ["pingsrv_ping"] and after[0]["output_keys"] == ["content", "structuredContent", "isError"]
    # session.idle -> client.session.prompt: under `opencode run` the message is only
    # stored (the run ends); it reaches the model with the next prompt of the session.
    assert any(c["hook"] == "event" and c["type"] == "session.idle" for c in calls)
    opencode.env.update({"ROOST_TEST_ON_IDLE": "", "ROOST_TEST_TRANSFORM": ""})
    again = events_of(opencode.prompt("and now?", session=session_id(events)))
    assert texts(again) == ["ok: TURNEND-NOTE\nand now?"]
    assert users(scripted(fake)[-1])[-2:] == ["TURNEND-NOTE", "and now?"]
    assert not fake.violations


def test_under_serve_a_prompt_at_session_idle_starts_a_new_turn_at_once(opencode):
    fake = opencode.start_fake(PING)
    opencode.configure(mcp=True, plugin={"ROOST_TEST_ON_IDLE": "TURNEND-NOTE"})
    with opencode.serve() as url:
        session = post(f"{url}/session", {})["id"]
        # The message call blocks until the turn ends and answers the assistant message.
        reply = post(f"{url}/session/{session}/message", {"parts": [{"type": "text", "text": "please ping"}]})
        assert reply["info"]["role"] == "assistant" and reply["info"]["tokens"]["input"] == 10
        assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["pinged"]
        # session.idle -> client.session.prompt: a new turn, with nobody prompting.
        turn_end = wait_until(lambda: [r for r in scripted(fake) if users(r)[-1:] == ["TURNEND-NOTE"]], 120,
                              what="the model call for the message sent at session.idle")
    assert turn_end[0]["reply"] == {"text": "ok: TURNEND-NOTE"}
    assert users(turn_end[0]) == ["please ping", "TURNEND-NOTE"]
    assert not fake.violations
