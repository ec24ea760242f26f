"""The pinned Qwen Code against the fake chat-completions API: what roost's Qwen Code host
relies on (docs/hosts.md, "Other agent CLIs"): a headless prompt, an MCP tool (deferred:
called through ``tool_call``) listed and called, resume by session id, hooks pushing text
mid-turn and at turn end, usage and sessions."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import proctools
import pytest
from clifake import PING, scripted, users
from conftest import wait_until
from fake_openai import content_text
from qwenkit import assistant_texts, events_of, session_id


def test_headless_prompt_is_answered_with_usage_and_a_session_file(qwen):
    fake = qwen.start_fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    qwen.configure()
    events = events_of(qwen.prompt("hello there"))
    assert assistant_texts(events) == ["ok: hello there"]
    result = next(e for e in events if e["type"] == "result")
    assert result["subtype"] == "success" and result["result"] == "ok: hello there"
    assert result["usage"]["input_tokens"] == 10 and result["usage"]["output_tokens"] == 5
    [request] = scripted(fake)
    assert users(request) == ["hello there"] and request["body"]["stream"] is True
    # The session: JSONL under ~/.qwen/projects/<cwd with / as ->/chats/<session id>.jsonl,
    # assistant records carrying usageMetadata.
    [chat] = qwen.chats()
    sid = session_id(events)
    assert chat.name == f"{sid}.jsonl" and chat.parent.parent.name == re.sub(r"[^A-Za-z0-9]", "-", str(qwen.work))
    records = [json.loads(line) for line in chat.read_text().splitlines()]
    answers = [r for r in records if r.get("type") == "assistant"]
    assert answers[-1]["message"]["parts"] == [{"text": "ok: hello there"}]
    assert answers[-1]["usageMetadata"]["promptTokenCount"] == 10
    assert not fake.violations


def test_mcp_tool_is_listed_called_and_its_result_reaches_the_next_request(qwen):
    fake = qwen.start_fake(PING)
    qwen.configure(mcp=True)
    events = events_of(qwen.prompt("please ping"))
    assert assistant_texts(events) == ["pinged"]
    assert qwen.pings() == ["hello"]
    first, second = scripted(fake)
    # MCP tools are deferred: not in tools[], named in the conversation, called through
    # the bridge tool tool_call.
    tools = [t["function"]["name"] for t in first["body"]["tools"]]
    assert "tool_call" in tools and not any(name.startswith("mcp__") for name in tools)
    assert any("mcp__pingsrv__ping" in content_text(m.get("content")) for m in first["body"]["messages"])
    call = second["body"]["messages"][-2]["tool_calls"][0]["function"]
    assert call["name"] == "tool_call" and json.loads(call["arguments"]) == {"name": "mcp__pingsrv__ping", "arguments": {"message": "hello"}}
    assert second["chat"][-1]["role"] == "tool" and "pong: hello" in content_text(second["chat"][-1]["content"])
    assert not fake.violations


def test_resume_by_session_id_carries_the_history(qwen):
    fake = qwen.start_fake(PING)
    qwen.configure(mcp=True)
    first = events_of(qwen.prompt("please ping"))
    sid = session_id(first)
    again = events_of(qwen.prompt("and now?", resume=sid))
    assert session_id(again) == sid
    assert assistant_texts(again) == ["ok: and now?"]
    last = scripted(fake)[-1]
    assert [m["role"] for m in last["chat"] if m["role"] != "system"] == ["user", "assistant", "tool", "assistant", "user"]
    assert users(last) == ["please ping", "and now?"]
    assert len(qwen.chats()) == 1  # the resume appends to the same session file
    assert not fake.violations


def test_hooks_push_text_after_a_tool_and_at_turn_end(qwen):
    fake = qwen.start_fake(PING)
    qwen.configure(mcp=True, hooks={"PostToolUse": "MIDTURN-NOTE", "Stop": "TURNEND-NOTE"})
    events = events_of(qwen.prompt("please ping"))
    # Stop blocked once: its reason is a new user message, answered in the same -p run
    # (stream-json glues that answer onto the one before it, in one text block).
    assert assistant_texts(events) == ["pingedok: TURNEND-NOTE"]
    _first, second, third = scripted(fake)
    # PostToolUse's additionalContext is appended to the tool result's text.
    assert content_text(second["chat"][-1]["content"]).endswith("pong: hello\nMIDTURN-NOTE")
    assert third["chat"][-1] == {"role": "user", "content": "TURNEND-NOTE"}
    calls = qwen.hook_calls()
    assert [c["argv_event"] for c in calls] == ["PostToolUse", "Stop", "Stop"]
    assert calls[0]["transcript_path"] == str(qwen.chats()[0])
    assert [c["stop_hook_active"] for c in calls[1:]] == [False, True]
    # What roost must cope with: the Stop hook's text is not written to the session file
    # (both answers are, back to back), so a resumed session no longer shows it.
    records = [json.loads(line) for line in qwen.chats()[0].read_text().splitlines()]
    said = [(r["type"], "".join(p.get("text", "") for p in r["message"]["parts"])) for r in records if r.get("type") in ("user", "assistant")]
    assert said[-2:] == [("assistant", "pinged"), ("assistant", "ok: TURNEND-NOTE")]
    assert not any("TURNEND-NOTE" in text for kind, text in said if kind == "user")
    assert not fake.violations


def test_a_process_the_session_started_pushes_into_an_idle_interactive_session(qwen, tmp_path):
    """Qwen Code's own cross-session messages, as roost could use them (docs/hosts.md): an
    interactive session registers itself and hands the processes it starts (its MCP
    servers: where ``roost mcp`` would run) its socket and a child token; a frame sent with
    that token is delivered without review and starts a turn at once, though the session
    is idle."""
    if shutil.which("tmux") is None:
        if os.environ.get("ROOST_REQUIRE_TMUX") == "1" or os.environ.get("ROOST_REQUIRE_QWEN") == "1":
            pytest.fail("tmux is not installed (apt-get install tmux)")
        pytest.skip("tmux is not installed")
    fake = qwen.start_fake({"default": {"steps": [{"say": "heard: {input}"}]}})
    qwen.configure(mcp=True)
    runtime = tmp_path / "run"
    runtime.mkdir()
    env = {**qwen.env, "XDG_RUNTIME_DIR": str(runtime), "TERM": "xterm-256color"}
    server = f"roost-qwen-{os.getpid()}"
    command = shlex.join(["env", "-i", *(f"{k}={v}" for k, v in env.items()), qwen.binary])
    subprocess.run(["tmux", "-L", server, "new-session", "-d", "-x", "160", "-y", "50", "-c", str(qwen.work), command], check=True, timeout=30)
    qwen_pid = None
    try:
        sessions = qwen.home / ".qwen" / "sessions"

        def registered() -> dict[str, Any] | None:
            # Written at start, then again with the socket once the session listens.
            for path in sessions.glob("*.json") if sessions.exists() else []:
                with contextlib.suppress(ValueError):
                    found = json.loads(path.read_text())
                    if found.get("ipcPath"):
                        return dict(found)
            return None

        record = wait_until(registered, 90, what="the session's registry record with its socket")
        qwen_pid = record["pid"]
        assert record["kind"] == "tui" and record["ipcPath"].startswith(str(runtime))

        def mcp_env() -> dict[str, str]:
            for pid, _ in proctools.with_cmdline("mcp_ping.py"):
                if proctools.parent(pid) == qwen_pid:
                    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)
            return {}

        child_env = wait_until(mcp_env, 90, what="the MCP server the session started")
        assert child_env["QWEN_CODE_MESSAGING_SOCKET"] == record["ipcPath"]
        token = child_env["QWEN_CODE_MESSAGING_TOKEN"]
        assert token != record["ipcToken"]  # the child token, not the registry's
        reply_path = str(runtime / "reply.sock")
        with socket.socket(socket.AF_UNIX) as inbox:
            inbox.bind(reply_path)
            inbox.listen(1)
            inbox.settimeout(60)
            with socket.socket(socket.AF_UNIX) as out:
                out.connect(record["ipcPath"])
                frame = {"msgV": 1, "msgId": "probe-1", "type": "user", "from": reply_path, "fromName": "roost",
                         "fromMode": "bypass", "toSessionId": record["sessionId"], "priority": "now",
                         "message": {"role": "user", "content": "PUSHED-NOTE"}}
                out.sendall(json.dumps({"msgV": 1, "type": "auth", "token": token}).encode() + b"\n" + json.dumps(frame).encode() + b"\n")
                out.shutdown(socket.SHUT_WR)
            conn, _ = inbox.accept()
            with conn:
                status = json.loads(conn.makefile().readline())
        assert (status["action"], status["status"], status["origMsgId"]) == ("delivery_status", "delivered", "probe-1")
        pushed = wait_until(lambda: [r for r in scripted(fake) if any("PUSHED-NOTE" in u for u in users(r))], 90, what="the model call for the pushed message")
        text = users(pushed[0])[-1]
        assert '<cross_session_message from="' in text and 'origin="own-process">\nPUSHED-NOTE\n</cross_session_message>' in text
        # The session file records it (a user record from the system, a notification):
        # what roost would acknowledge from.
        records = [json.loads(line) for line in qwen.chats()[0].read_text().splitlines()]
        [kept] = [r for r in records if r.get("type") == "user" and "PUSHED-NOTE" in json.dumps(r.get("message"))]
        assert (kept["provenance"], kept["subtype"]) == ("system", "notification")
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], timeout=30, check=False)
        if qwen_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(qwen_pid, signal.SIGKILL)
