"""The Qwen Code kit: the pinned Qwen Code (tests/qwen, scripts/install-qwen.sh) with an
isolated ``~/.qwen`` talking to the fake chat-completions API (``fake_chat``, dialect
``qwen``) only.

Offline: ``settings.json`` turns off usage statistics, telemetry, auto-update and the
extra model calls (memory extraction, follow-up suggestions), plus
``QWEN_TELEMETRY_ENABLED=false``, ``QWEN_USAGE_STATISTICS_ENABLED=false`` and
``QWEN_CODE_NO_RELAUNCH=1``; the endpoint and a fake key come from ``OPENAI_*``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from cliworld import CliWorld, json_lines, require_cli
from fake_chat import FakeChat


def qwen_bin() -> str:
    return require_cli("Qwen Code", "ROOST_QWEN_BIN", "qwen", "qwen", "ROOST_REQUIRE_QWEN")


class QwenKit(CliWorld):
    """One test's Qwen Code: ``~/.qwen/settings.json`` and the fake model."""

    def __init__(self, tmp_path: Path, binary: str) -> None:
        super().__init__(tmp_path, "qwen", binary)
        self.env.update({
            "OPENAI_API_KEY": "fake-qwen-key", "OPENAI_MODEL": "fake-model", "QWEN_CODE_NO_RELAUNCH": "1",
            "QWEN_TELEMETRY_ENABLED": "false", "QWEN_USAGE_STATISTICS_ENABLED": "false",
        })
        self.fake: FakeChat | None = None

    def start_fake(self, scenario: Any) -> FakeChat:
        self.fake = FakeChat(scenario, self.root / "chat.jsonl", dialect="qwen").start()
        self.env["OPENAI_BASE_URL"] = self.fake.base_url
        return self.fake

    def configure(self, *, mcp: bool = False, hooks: dict[str, str] | None = None) -> None:
        """Write ~/.qwen/settings.json (the ping MCP server when MCP, trusted; HOOKS:
        event -> text pushed)."""
        settings: dict[str, Any] = {
            "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True},
            "model": {"name": "fake-model"},
            # Qwen Code's own extra model calls after a turn (memory extraction and
            # consolidation, next-prompt suggestions): tokens spent on nobody's behalf.
            "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
            "ui": {"enableFollowupSuggestions": False},
        }
        if mcp:
            command, args, env = self.mcp_server()
            settings["mcpServers"] = {"pingsrv": {"command": command, "args": args, "env": env, "trust": True}}
        if hooks:
            settings["hooks"] = {
                event: [{**({"matcher": ".*"} if event in ("PreToolUse", "PostToolUse") else {}),
                         "hooks": [{"type": "command", "command": self.hook_command(event, text)}]}]
                for event, text in hooks.items()
            }
        folder = self.home / ".qwen"
        folder.mkdir(exist_ok=True)
        (folder / "settings.json").write_text(json.dumps(settings))

    def prompt(self, text: str, *, resume: str | None = None) -> subprocess.CompletedProcess[str]:
        """``qwen -p TEXT --output-format stream-json`` (``--resume ID`` first when given)."""
        return self.run([*(["--resume", resume] if resume else []), "-p", text, "--output-format", "stream-json"])

    def chats(self) -> list[Path]:
        """The session files (``~/.qwen/projects/<cwd, / as ->/chats/<session id>.jsonl``)."""
        return sorted((self.home / ".qwen" / "projects").rglob("chats/*.jsonl"))


def events_of(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The stream-json events of a finished run (asserting it exited 0)."""
    assert result.returncode == 0, f"qwen exited {result.returncode}\n{result.stderr[-3000:]}"
    return json_lines(result.stdout)


def session_id(events: list[dict[str, Any]]) -> str:
    return str(next(e["session_id"] for e in events if e.get("type") == "system" and e.get("subtype") == "init"))


def assistant_texts(events: list[dict[str, Any]]) -> list[str]:
    """The text blocks of the assistant messages, in order."""
    return [block["text"] for event in events if event.get("type") == "assistant"
            for block in event["message"]["content"] if block.get("type") == "text" and block.get("text")]
