"""The interactive Claude Code (its TUI in tmux), set up by ``roost claude install``: an
idle session is not woken by an agent message (nothing can wake it: channels need a
claude.ai login); the message waits and arrives with the user's next prompt."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest
from claudekit import Tmux, transcript_entries
from conftest import wait_until
from fg import run_async, session
from pikit import roost_bin


def peer_row(daemon, name: str) -> dict[str, Any] | None:
    return next((row for row in daemon.call("agents")["agents"] if row["name"] == name), None)


def send_while_idle(daemon, tmp_path, fake, me: dict[str, Any], message: str) -> None:
    """An outside peer sends ``message`` to the idle Claude session ``me``: it is held for
    the session, and nothing wakes it (no model call happens)."""
    calls = len(fake.requests())

    async def story():
        async with session(daemon, tmp_path, name="outsider") as outsider:
            ok, text, data = await outsider.call_tool("roost_send", {"to": me["id"], "message": message})
            assert ok and data["result"] == "delivered", text

    run_async(story)
    wait_until(lambda: peer_row(daemon, me["name"])["pending"] == 1, 30, what="the message held")
    assert len(fake.requests()) == calls


def require_tmux() -> None:
    if shutil.which("tmux") is None:
        if os.environ.get("ROOST_REQUIRE_TMUX") == "1" or os.environ.get("ROOST_REQUIRE_CLAUDE") == "1":
            pytest.fail("tmux is not installed (apt-get install tmux)")
        pytest.skip("tmux is not installed")


def test_an_idle_interactive_session_gets_its_items_with_the_next_prompt(claude_kit, write_config, tmp_path):
    require_tmux()
    write_config({"agentExternalMessages": True})
    scenario = {
        "run": [
            # The prompt is typed once roost's server is connected, so its tools are listed
            # (the strict fake would refuse a call to an unlisted one).
            {"match": "^join roost", "steps": [{"agents": {}}, {"say": "joined the roost"}]},
            {"match": "^what now", "steps": [{"say": "now: {input}"}]},
        ],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = claude_kit.fake(scenario)
    daemon = claude_kit.daemon()
    installed = subprocess.run([roost_bin(), "claude", "install"], env=claude_kit.env, capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0, installed.stderr
    project = tmp_path / "project"
    project.mkdir()
    claude_kit.seed_interactive(project)
    debug_log = tmp_path / "claude-debug.log"
    tui = Tmux("tui", [claude_kit.claude, "--debug-file", str(debug_log)], {**claude_kit.env, "ROOST_NAME": "cc-tui"}, project, tmp_path)
    try:
        tui.wait_screen("❯", timeout=60)
        # The interactive Claude Code shows its prompt before its MCP servers are up and
        # does not hold a first prompt for them (docs/hosts.md): a user types once roost's
        # server is connected, as Claude Code's own log says.
        wait_until(lambda: debug_log.exists() and 'Server "roost" connected' in debug_log.read_text(errors="replace"), 60, what="roost's server connected")
        tui.keys("-l", "join roost please")
        tui.keys("Enter")
        tui.wait_screen("joined the roost", timeout=90)
        me = wait_until(lambda: peer_row(daemon, "cc-tui"), 30, what="the TUI session as a peer")
        assert me["state"] == "connected" and me["host"] == "claude"
        # The turn is over once its Stop hooks have run (Claude Code notes that in the
        # transcript); a message before that would be handed over at the stop.
        wait_until(lambda: any(e.get("subtype") == "stop_hook_summary" for e in transcript_entries(me["session"])), 60, what="the end of the turn")
        send_while_idle(daemon, tmp_path, fake, me, "idle news")
        tui.keys("-l", "what now")
        tui.keys("Enter")
        tui.wait_screen("now: what now", timeout=90)
        wait_until(lambda: peer_row(daemon, "cc-tui")["pending"] == 0, 30, what="the message acknowledged")
        answered = next(r for r in fake.requests() if r["reply"].get("text", "").startswith("now: what now"))
        assert answered["reply"]["text"] == "now: what now\nidle news"
        system = [m for m in answered["raw"] if m["role"] == "system" and "idle news" in str(m["content"])]
        assert len(system) == 1 and "UserPromptSubmit hook additional context: [roost seq" in str(system[0]["content"])
    finally:
        tui.kill()
