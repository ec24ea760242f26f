"""The Gemini CLI kit: the pinned Gemini CLI (tests/gemini, scripts/install-gemini.sh) with
an isolated ``~/.gemini`` talking to the fake Gemini API (``fake_gemini``) only.

Offline: ``settings.json`` turns off usage statistics, telemetry, auto-update and the
update nag; ``GEMINI_CLI_NO_RELAUNCH=1`` keeps it in one process; the key is a fake
``GEMINI_API_KEY`` and ``GOOGLE_GEMINI_BASE_URL`` points at the fake.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from cliworld import CliWorld, json_lines, require_cli
from fake_gemini import FakeGemini

MODEL = "gemini-2.5-flash"


def gemini_bin() -> str:
    return require_cli("Gemini CLI", "ROOST_GEMINI_BIN", "gemini", "gemini", "ROOST_REQUIRE_GEMINI")


class GeminiKit(CliWorld):
    """One test's Gemini CLI: ``~/.gemini/settings.json`` and the fake model."""

    def __init__(self, tmp_path: Path, binary: str) -> None:
        super().__init__(tmp_path, "gemini", binary)
        self.env.update({"GEMINI_API_KEY": "fake-gemini-key", "GEMINI_CLI_NO_RELAUNCH": "1"})
        self.fake: FakeGemini | None = None

    def start_fake(self, scenario: Any) -> FakeGemini:
        self.fake = FakeGemini(scenario, self.root / "gemini.jsonl").start()
        self.env["GOOGLE_GEMINI_BASE_URL"] = self.fake.origin
        return self.fake

    def configure(self, *, mcp: bool = False, hooks: dict[str, str] | None = None) -> None:
        """Write ~/.gemini/settings.json (the ping MCP server when MCP, trusted: untrusted
        MCP tools are left out of headless requests; HOOKS: event -> text pushed)."""
        settings: dict[str, Any] = {
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "model": {"name": MODEL},
        }
        if mcp:
            command, args, env = self.mcp_server()
            settings["mcpServers"] = {"pingsrv": {"command": command, "args": args, "env": env, "trust": True}}
        if hooks:
            settings["hooks"] = {
                event: [{**({"matcher": ".*"} if event in ("BeforeTool", "AfterTool") else {}),
                         "hooks": [{"type": "command", "command": self.hook_command(event, text)}]}]
                for event, text in hooks.items()
            }
        folder = self.home / ".gemini"
        folder.mkdir(exist_ok=True)
        (folder / "settings.json").write_text(json.dumps(settings))

    def prompt(self, text: str, *, resume: str | None = None) -> subprocess.CompletedProcess[str]:
        """``gemini -p TEXT --output-format stream-json`` (``--resume ID`` first when given)."""
        return self.run([*(["--resume", resume] if resume else []), "-p", text, "--output-format", "stream-json"])

    def chats(self) -> list[Path]:
        """The session files the CLI wrote (``~/.gemini/tmp/<project>/chats/session-*.jsonl``)."""
        return sorted((self.home / ".gemini" / "tmp").rglob("chats/session-*.jsonl"))


def events_of(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The stream-json events of a finished run (asserting it exited 0)."""
    assert result.returncode == 0, f"gemini exited {result.returncode}\n{result.stderr[-3000:]}"
    return json_lines(result.stdout)


def session_id(events: list[dict[str, Any]]) -> str:
    return str(next(e["session_id"] for e in events if e.get("type") == "init"))


def assistant_texts(events: list[dict[str, Any]]) -> list[str]:
    """The assistant's messages, the deltas of each joined."""
    texts: list[str] = []
    joining = False
    for event in events:
        if event.get("type") == "message" and event.get("role") == "assistant":
            if joining and event.get("delta"):
                texts[-1] += event["content"]
            else:
                texts.append(event["content"])
            joining = bool(event.get("delta"))
        else:
            joining = False
    return texts
