"""A user's own Claude Code as a roost peer, through what ``roost claude install`` puts in
its settings: the ``roost mcp`` server and the hooks. The real Claude Code, the fake
Anthropic server, and pushes mid-turn and at the stop (the next prompt's delivery is in
test_claude_interactive.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from claudekit import transcript_entries
from conftest import wait_until
from fg import in_thread, run_async, session
from hostkit import JsonLinesProgram
from pikit import roost_bin
from test_claude_background import hook_contexts, model_visible, user_prompts
from test_claude_interactive import send_while_idle

from roost_core import locks
from roost_core.policy import NO_USER_AUTHORITY

AUTHORITY_LINE = NO_USER_AUTHORITY.splitlines()[0]


class StreamClaude(JsonLinesProgram):
    """Claude Code driven as an SDK host drives it (stream-json in and out): a live
    session that stays up, and idle, between prompts."""

    def __init__(self, claude: str, env: dict[str, str], cwd: Path) -> None:
        super().__init__([claude, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"], env, cwd, close_wait=20)

    def results(self) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e.get("type") == "result"]

    def session_id(self) -> str | None:
        with self.lock:
            return next((e.get("session_id") for e in self.events if e.get("session_id")), None)

    def prompt(self, text: str) -> None:
        self.write({"type": "user", "message": {"role": "user", "content": text}})


def peer_row(daemon, name: str) -> dict[str, Any] | None:
    return next((row for row in daemon.call("agents")["agents"] if row["name"] == name), None)


def test_a_users_claude_code_gets_items_mid_turn_and_at_the_stop(claude_kit, write_config, tmp_path):
    write_config({"agentSpawnHosts": ["scripted"], "agentExternalMessages": True})
    gate = tmp_path / "gate"
    scenario = {
        "run": [
            {"match": "^spawn a counter", "steps": [
                {"spawn": {"task": "count the apples", "name": "kid", "host": "scripted"}},
                {"wait_for": str(gate)},
                {"say": "final words"},
            ]},
            {"match": "stop here", "steps": [{"say": "ok, noted at the stop"}]},
        ],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = claude_kit.fake(scenario)
    fake.hold = lambda reply: reply.get("text") == "final words"
    daemon = claude_kit.daemon()
    installed = subprocess.run([roost_bin(), "claude", "install"], env=claude_kit.env, capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0, installed.stderr
    project = tmp_path / "project"
    claude = StreamClaude(claude_kit.claude, {**claude_kit.env, "ROOST_NAME": "cc-user"}, project)
    try:

        async def story():
            async with session(daemon, tmp_path, name="outsider") as outsider:
                await outsider.ensure_registered()
                claude.prompt("spawn a counter and wait")
                # The session joined on its first roost tool call, keyed on its transcript.
                me = await in_thread(wait_until, lambda: peer_row(daemon, "cc-user"), 90, what="the Claude session as a peer")
                assert me["kind"] == "foreground" and me["session"].endswith(f"{claude.session_id()}.jsonl")
                # Its writer lock names Claude Code itself (the MCP server's parent).
                assert locks.lock_holder(me["session"]) == claude.process.pid
                # The child's report is held for the session while its slow tool runs...
                await in_thread(wait_until, lambda: peer_row(daemon, "cc-user")["pending"] == 1, 60, what="the report held")
                gate.write_text("go")
                # ... and handed over after that tool. Then, while the last answer streams, a
                # message from outside arrives: the stop is blocked with it.
                assert await in_thread(fake.holding.wait, 90), "the last answer never started"
                ok, text, data = await outsider.call_tool("roost_send", {"to": me["id"], "message": "stop here please"})
                assert ok and data["result"] == "delivered", text
                fake.release.set()
                await in_thread(wait_until, lambda: len(claude.results()) == 1, 90, what="the turn's end")
                await in_thread(wait_until, lambda: peer_row(daemon, "cc-user")["pending"] == 0, 30, what="every item acknowledged")
                # The Stop hook after the answer to it tells the model had it (issue 42.4).
                _ok, _text, data = await outsider.call_tool("roost_agents", {})
                (mine,) = [r for r in data["sent"] if r["to"] == me["id"]]
                assert mine["state"] == "seen" and mine["seen"] >= mine["created"], mine
                return me

        me = run_async(story)
        transcript = me["session"]
        entries = transcript_entries(transcript)
        contexts = hook_contexts(entries)
        assert [event for event, _, _ in contexts] == ["PostToolUse", "Stop"], contexts
        assert 'from="kid"' in contexts[0][2] and 'kind="report"' in contexts[0][2]
        assert "stop here please" in contexts[1][2] and 'relation="external"' in contexts[1][2]
        assert all(AUTHORITY_LINE in text for _, _, text in contexts)
        # Each exactly once in what the model read; never as the user's words.
        visible = model_visible(entries)
        for needle in ("Done: count the apples", "stop here please"):
            assert sum(text.count(needle) for text in visible) == 1, needle
        assert user_prompts(entries) == ["spawn a counter and wait"]
        # The run went on after the blocked stop and ended with the answer to the message.
        assert claude.results()[-1]["result"] == "ok, noted at the stop"
    finally:
        claude.close()


def test_a_session_with_a_deep_temp_folder_still_gets_items_from_its_hooks(claude_kit, write_config, tmp_path):
    # Under a TMPDIR this deep, the hook socket of `roost mcp` would not fit in sun_path:
    # the server and the hooks must agree on a place that fits, or no hook hands anything.
    write_config({"agentExternalMessages": True})
    fake = claude_kit.fake({
        "run": [
            {"match": "^join roost", "steps": [{"agents": {}}, {"say": "joined the roost"}]},
            {"match": "^what now", "steps": [{"say": "now: {input}"}]},
        ],
        "default": {"steps": [{"say": "ok: {input}"}]},
    })
    daemon = claude_kit.daemon()
    installed = subprocess.run([roost_bin(), "claude", "install"], env=claude_kit.env, capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0, installed.stderr
    deep = tmp_path / ("t" * 100)
    deep.mkdir()
    assert len(str(deep / f"roost-{os.getuid()}" / ("cc-" + "0" * 20 + ".sock"))) > 107
    claude = StreamClaude(claude_kit.claude, {**claude_kit.env, "TMPDIR": str(deep), "ROOST_NAME": "cc-deep"}, tmp_path / "project")
    try:
        claude.prompt("join roost please")
        wait_until(lambda: len(claude.results()) == 1, 90, what="the first turn's end")
        me = peer_row(daemon, "cc-deep")
        assert me is not None and me["host"] == "claude"
        # The turn is over once its Stop hooks have run (a message before that would be
        # handed over at the stop).
        wait_until(lambda: any(e.get("subtype") == "stop_hook_summary" for e in transcript_entries(me["session"])), 60, what="the end of the turn")
        send_while_idle(daemon, tmp_path, fake, me, "deep news")
        claude.prompt("what now")
        wait_until(lambda: len(claude.results()) == 2, 90, what="the second turn's end")
        # The next prompt's hook handed it over, and the transcript showing it acked it.
        wait_until(lambda: peer_row(daemon, "cc-deep")["pending"] == 0, 30, what="the message acknowledged")
        contexts = hook_contexts(transcript_entries(me["session"]))
        assert [event for event, _, _ in contexts] == ["UserPromptSubmit"], contexts
        assert "deep news" in contexts[0][2]
    finally:
        claude.close()
